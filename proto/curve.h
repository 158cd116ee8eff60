/*
 * curve.h — CURVE keys for skysieve's ZeroMQ sockets (README
 * "Authentication"): key files, a key pair maker, and the socket options
 * of a CURVE server (the daemon's bound sockets) and client (the tools).
 *
 * A key file is ZeroMQ's certificate text form, the lines that matter:
 *     public-key = "<40 Z85 characters>"
 *     secret-key = "<40 Z85 characters>"     (only in a secret key file)
 * Other lines (comments, metadata) are ignored. ss_curve_write_keypair
 * writes NAME.key (both, mode 0600) and NAME.pub (the public key alone),
 * which is what a peer is given.
 */
#ifndef SS_CURVE_H
#define SS_CURVE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SS_CURVE_Z85 41             /* 40 Z85 characters and the NUL */

typedef struct ss_curve_key {
    char pub[SS_CURVE_Z85];
    char sec[SS_CURVE_Z85];         /* "" in a public key file */
} ss_curve_key_t;

/* Read the key file at path into *k. want_secret: the secret key must be
 * there. Returns 0, or -1 with a message naming the file in err. */
int ss_curve_read_key(const char *path, int want_secret, ss_curve_key_t *k, char *err, size_t n);

/* Make a key pair (zmq_curve_keypair) and write dir/name.key and
 * dir/name.pub; neither may exist already. Returns 0, or -1 with err. */
int ss_curve_write_keypair(const char *dir, const char *name, char *err, size_t n);

/* sock becomes a CURVE server with the secret key of k (before it binds).
 * Returns 0, or -1 (errno set). */
int ss_curve_server(void *sock, const ss_curve_key_t *k);

/* sock becomes a CURVE client with its own pair mine, to the server whose
 * public key is server_pub (before it connects). Returns 0, or -1. */
int ss_curve_client(void *sock, const ss_curve_key_t *mine, const char *server_pub);

/* The client side of the tools: with both paths NULL nothing is done;
 * with both, sock becomes a CURVE client (key_file: the tool's own secret
 * key file, server_file: the daemon's public key file). One without the
 * other is an error. Returns 0, or -1 with err. */
int ss_curve_client_files(void *sock, const char *key_file, const char *server_file, char *err,
                          size_t n);

#ifdef __cplusplus
}
#endif

#endif
