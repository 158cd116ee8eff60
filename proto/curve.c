/*
 * curve.c — CURVE key files and socket options (curve.h).
 */
#include "curve.h"

#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

/* The quoted 40-character value of `name = "..."` on line, into out;
 * 1 when the line is that key. */
static int key_line(const char *line, const char *name, char out[SS_CURVE_Z85])
{
    while (*line == ' ' || *line == '\t')
        line++;
    const size_t nl = strlen(name);
    if (strncmp(line, name, nl) != 0)
        return 0;
    const char *q = strchr(line + nl, '"');
    if (!q || strlen(q + 1) < SS_CURVE_Z85 || q[SS_CURVE_Z85] != '"')
        return 0;
    memcpy(out, q + 1, SS_CURVE_Z85 - 1);
    out[SS_CURVE_Z85 - 1] = '\0';
    return 1;
}

/* A Z85 key that decodes to 32 bytes. */
static int z85_ok(const char *z)
{
    uint8_t raw[32];
    return strlen(z) == SS_CURVE_Z85 - 1 && zmq_z85_decode(raw, z) != NULL;
}

int ss_curve_read_key(const char *path, int want_secret, ss_curve_key_t *k, char *err, size_t n)
{
    memset(k, 0, sizeof *k);
    FILE *fp = fopen(path, "r");
    if (!fp) {
        snprintf(err, n, "%s: %s", path, strerror(errno));
        return -1;
    }
    char line[256];
    while (fgets(line, sizeof line, fp)) {
        if (!key_line(line, "public-key", k->pub))
            key_line(line, "secret-key", k->sec);
    }
    fclose(fp);
    if (!z85_ok(k->pub)) {
        snprintf(err, n, "%s: no valid public-key = \"<40 Z85 characters>\" line", path);
        return -1;
    }
    if (want_secret && !z85_ok(k->sec)) {
        snprintf(err, n, "%s: no valid secret-key line (a .pub file holds the public key only)",
                 path);
        return -1;
    }
    return 0;
}

/* Write text to a new file path with mode; -1 with err when it exists. */
static int write_new(const char *path, mode_t mode, const char *text, char *err, size_t n)
{
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) {
        snprintf(err, n, "%s: %s", path, strerror(errno));
        return -1;
    }
    const size_t len = strlen(text);
    const int ok = write(fd, text, len) == (ssize_t)len;
    if (close(fd) != 0 || !ok) {
        snprintf(err, n, "%s: cannot write", path);
        return -1;
    }
    return 0;
}

int ss_curve_write_keypair(const char *dir, const char *name, char *err, size_t n)
{
    char pub[SS_CURVE_Z85], sec[SS_CURVE_Z85];
    if (zmq_curve_keypair(pub, sec) != 0) {
        snprintf(err, n, "zmq_curve_keypair: %s (libzmq without CURVE?)", zmq_strerror(zmq_errno()));
        return -1;
    }
    char path[4096], text[512];
    snprintf(text, sizeof text,
             "#   skysieve CURVE key pair \"%s\": keep this file secret (mode 0600);\n"
             "#   give peers %s.pub\n"
             "metadata\n"
             "curve\n"
             "    public-key = \"%s\"\n"
             "    secret-key = \"%s\"\n", name, name, pub, sec);
    snprintf(path, sizeof path, "%s/%s.key", dir, name);
    if (write_new(path, 0600, text, err, n) != 0)
        return -1;
    snprintf(text, sizeof text,
             "#   skysieve CURVE public key \"%s\"\n"
             "metadata\n"
             "curve\n"
             "    public-key = \"%s\"\n", name, pub);
    snprintf(path, sizeof path, "%s/%s.pub", dir, name);
    return write_new(path, 0644, text, err, n);
}

int ss_curve_server(void *sock, const ss_curve_key_t *k)
{
    const int one = 1;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, k->sec, SS_CURVE_Z85 - 1) != 0)
        return -1;
    /* a ZAP domain makes libzmq ask the daemon's ZAP handler about every peer */
    return zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "skysieve", 8);
}

int ss_curve_client(void *sock, const ss_curve_key_t *mine, const char *server_pub)
{
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server_pub, SS_CURVE_Z85 - 1) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, mine->pub, SS_CURVE_Z85 - 1) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, mine->sec, SS_CURVE_Z85 - 1) != 0)
        return -1;
    return 0;
}

int ss_curve_client_files(void *sock, const char *key_file, const char *server_file, char *err,
                          size_t n)
{
    if (!key_file && !server_file)
        return 0;
    if (!key_file || !server_file) {
        snprintf(err, n, "CURVE needs both --curve-key (this client's key file) and --server-key "
                 "(the daemon's public key file)");
        return -1;
    }
    ss_curve_key_t mine, server;
    if (ss_curve_read_key(key_file, 1, &mine, err, n) != 0 ||
        ss_curve_read_key(server_file, 0, &server, err, n) != 0)
        return -1;
    if (ss_curve_client(sock, &mine, server.pub) != 0) {
        snprintf(err, n, "CURVE: %s", zmq_strerror(zmq_errno()));
        return -1;
    }
    return 0;
}
