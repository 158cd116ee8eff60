/*
 * keygen_cli.c — skysieve-keygen: make a CURVE key pair for skysieved or
 * one of its clients (README "Authentication").
 */
#include <stdio.h>
#include <string.h>

#include "proto/curve.h"

#define PROG "skysieve-keygen"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: " PROG " NAME [DIR]\n"
"Make a CURVE key pair (zmq_curve_keypair) and write DIR/NAME.key (public\n"
"and secret key, mode 0600: keep it where only its owner reads it) and\n"
"DIR/NAME.pub (the public key: give it to the peer). Neither file may exist.\n"
"DIR defaults to the current directory.\n"
"  The daemon: security.curve_key = NAME.key; clients get NAME.pub\n"
"  (--server-key). A client: --curve-key NAME.key; its NAME.pub goes into\n"
"  the daemon's security.client_keys directory.\n"
"Exit status: 0 written; 1 not written (the reason on stderr); 2 bad usage.\n");
}

int main(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        return 0;
    }
    if (argc < 2 || argc > 3 || !argv[1][0] || strchr(argv[1], '/')) {
        usage(stderr);
        return 2;
    }
    const char *dir = argc == 3 ? argv[2] : ".";
    char err[600];
    if (ss_curve_write_keypair(dir, argv[1], err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    printf("%s/%s.key (secret) and %s/%s.pub (public) written\n", dir, argv[1], dir, argv[1]);
    return 0;
}
