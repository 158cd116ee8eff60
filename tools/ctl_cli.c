/*
 * ctl_cli.c — skysieve-ctl: one control request to a running skysieved
 * (PROTOCOL.md §8) and its response.
 *
 *   skysieve-ctl [--config FILE | --endpoint EP] [--feed NAME] COMMAND
 *
 * It finds the control endpoint as the daemon chose it: --endpoint, else
 * control.endpoint of the config file (--config, else the daemon's
 * default path, else the built-in default config), moved where the daemon
 * moves it when its directory is missing (ss_config_control_endpoint).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "config/config.h"
#include "proto/curve.h"
#include "proto/proto.h"

#define PROG "skysieve-ctl"
#define EXIT_REFUSED 1
#define EXIT_USAGE 2
#define EXIT_NO_ANSWER 3
#define RESPONSE_MAX (1 << 22)

static void usage(FILE *out)
{
    fprintf(out,
"Usage: " PROG " [options] COMMAND\n"
"Send one control request to a running skysieved and print its response\n"
"(one JSON object, PROTOCOL.md section 8) on stdout.\n"
"\n"
"Commands:\n"
"  status   version, uptime, and per feed: state, backend, source, processed,\n"
"           queue depth, frames/s, last seq\n"
"  stats    every counter (of --feed, or of every feed)\n"
"  reset    forget the history of --feed (or of every feed) before its next frame\n"
"  reload   re-read the config file, as SIGHUP does\n"
"  config   the running config\n"
"\n"
"  -c, --config FILE     the daemon's config file: its control.endpoint\n"
"                        [" SS_CONFIG_DEFAULT_PATH ", else the built-in default]\n"
"  -e, --endpoint EP     the control endpoint itself (instead of --config)\n"
"  -f, --feed NAME       the feed (stats, reset)\n"
"  -t, --timeout S       wait this long for the answer                    [5]\n"
"      --curve-key FILE  CURVE: this client's key file (skysieve-keygen NAME:\n"
"                        NAME.key; the daemon must list NAME.pub)\n"
"      --server-key FILE CURVE: the daemon's public key file (its .pub)\n"
"  -h, --help            this text\n"
"The endpoint is used where the daemon binds it: an ipc:// endpoint whose\n"
"directory is missing moves to $XDG_RUNTIME_DIR/skysieve-control (or /tmp).\n"
"Exit status: 0 the daemon answered ok; 1 it refused (the reason on stderr);\n"
"2 bad usage or an unreadable config; 3 no answer in time.\n");
}

/* The configured control endpoint: --endpoint, or the config's. */
static int configured_endpoint(const char *config, char *ep, size_t n)
{
    ss_config_t *c = malloc(sizeof *c);
    if (!c)
        return -1;
    char err[600];
    const char *path = config ? config : SS_CONFIG_DEFAULT_PATH;
    int rc = 0;
    if (!config && access(path, F_OK) != 0) {
        ss_config_defaults(c);
    } else if (ss_config_load_file(path, c, err, sizeof err) != SS_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        rc = -1;
    }
    if (rc == 0 && !c->control_endpoint[0]) {
        fprintf(stderr, PROG ": %s has no control endpoint (control.endpoint is \"\")\n", path);
        rc = -1;
    }
    if (rc == 0)
        snprintf(ep, n, "%s", c->control_endpoint);
    free(c);
    return rc;
}

static int command(const char *name, ss_ctl_cmd_t *cmd)
{
    for (int i = 0; i < SS_CTL__COUNT; i++)
        if (strcmp(name, ss_ctl_cmd_name((ss_ctl_cmd_t)i)) == 0) {
            *cmd = (ss_ctl_cmd_t)i;
            return 0;
        }
    return -1;
}

/* The CURVE key files of the command line (NULL: none). */
static const char *curve_key, *server_key;

/* Send the request to ep, wait for the answer: 0, EXIT_NO_ANSWER, or
 * EXIT_USAGE (bad key files). */
static int exchange(const char *ep, const char *req, double timeout, char *resp, size_t cap,
                    size_t *len)
{
    void *ctx = zmq_ctx_new(), *s = ctx ? zmq_socket(ctx, ZMQ_REQ) : NULL;
    int rc = EXIT_NO_ANSWER;
    char cerr[600];
    if (s && ss_curve_client_files(s, curve_key, server_key, cerr, sizeof cerr) != 0) {
        fprintf(stderr, PROG ": %s\n", cerr);
        zmq_close(s);
        zmq_ctx_term(ctx);
        return EXIT_USAGE;
    }
    if (s) {
        int zero = 0, ms = (int)(timeout * 1000);
        zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(s, ZMQ_RCVTIMEO, &ms, sizeof ms);
        zmq_setsockopt(s, ZMQ_SNDTIMEO, &ms, sizeof ms);
        if (zmq_connect(s, ep) == 0 && zmq_send(s, req, strlen(req), 0) >= 0) {
            int got = zmq_recv(s, resp, cap - 1, 0);
            if (got >= 0) {
                *len = (size_t)got < cap - 1 ? (size_t)got : cap - 1;
                resp[*len] = '\0';
                rc = 0;
            }
        }
        if (rc != 0)
            fprintf(stderr, PROG ": no answer from %s within %g s: %s\n", ep, timeout,
                    zmq_strerror(zmq_errno()));
        zmq_close(s);
    }
    if (ctx)
        zmq_ctx_term(ctx);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        { "config", required_argument, 0, 'c' }, { "endpoint", required_argument, 0, 'e' },
        { "feed", required_argument, 0, 'f' }, { "timeout", required_argument, 0, 't' },
        { "help", no_argument, 0, 'h' }, { "curve-key", required_argument, 0, 'K' },
        { "server-key", required_argument, 0, 'S' }, { 0, 0, 0, 0 },
    };
    const char *config = NULL, *endpoint = NULL, *feed = NULL;
    double timeout = 5.0;
    int c;
    while ((c = getopt_long(argc, argv, "c:e:f:t:h", lo, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'c': config = optarg; break;
        case 'K': curve_key = optarg; break;
        case 'S': server_key = optarg; break;
        case 'e': endpoint = optarg; break;
        case 'f': feed = optarg; break;
        case 't':
            errno = 0;
            timeout = strtod(optarg, &end);
            if (errno || *end || !(timeout > 0) || timeout > 3600) {
                fprintf(stderr, PROG ": invalid --timeout \"%s\"\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    ss_ctl_request_t r = { 0 };
    if (optind + 1 != argc || command(argv[optind], &r.cmd) != 0) {
        fprintf(stderr, PROG ": one command expected: status, stats, reset, reload or config\n");
        return EXIT_USAGE;
    }
    if (feed && snprintf(r.feed, sizeof r.feed, "%s", feed) >= (int)sizeof r.feed) {
        fprintf(stderr, PROG ": feed name too long\n");
        return EXIT_USAGE;
    }
    char configured[SS_ENDPOINT_MAX], ep[SS_ENDPOINT_MAX + 32], req[512];
    if (endpoint)
        snprintf(configured, sizeof configured, "%s", endpoint);
    else if (configured_endpoint(config, configured, sizeof configured) != 0)
        return EXIT_USAGE;
    ss_config_control_endpoint(configured, ep, sizeof ep, NULL, 0);
    if (ss_proto_encode_request(&r, req, sizeof req) < 0)
        return EXIT_USAGE;
    char *resp = malloc(RESPONSE_MAX);
    size_t len = 0;
    if (!resp)
        return EXIT_REFUSED;
    int rc = exchange(ep, req, timeout, resp, RESPONSE_MAX, &len);
    if (rc == 0) {
        ss_ctl_response_t d;
        ss_proto_error_t err;
        if (ss_proto_decode_response(resp, len, &d, &err) != SS_OK) {
            fprintf(stderr, PROG ": the answer does not decode: %s\n", err.text);
            rc = EXIT_REFUSED;
        } else {
            puts(resp);
            if (!d.ok) {
                fprintf(stderr, PROG ": %s refused: %s\n", argv[optind], d.error);
                rc = EXIT_REFUSED;
            }
            ss_ctl_response_free(&d);
        }
    }
    free(resp);
    return rc;
}
