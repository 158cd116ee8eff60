/*
 * main.c — skysieved's command line. Everything else is in
 * skysieve_daemon_lib (daemon.h).
 *
 * Exit status: 0 after a clean stop (SIGTERM/SIGINT drained, exit_at_end,
 * --check-config of a good file, --help, --version); 1 when the daemon
 * cannot start or a backend broke (systemd restarts it); 2 for a bad
 * command line; 78 (EX_CONFIG) for a config file that does not load or
 * validate (the unit's RestartPreventExitStatus).
 */
#include "daemon.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define TAG "main"
#define EXIT_USAGE 2
#define EXIT_CONFIG 78

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: skysieved [OPTION]...\n"
            "Satellite and star-field monitoring daemon: registers each incoming frame,\n"
            "subtracts its predicted static background, and publishes the residuals and\n"
            "the detections found in them over ZeroMQ.\n"
            "\n"
            "  -c, --config FILE         config file (default %s; when that file does\n"
            "                            not exist and no --config is given, the built-in\n"
            "                            default config runs: one synthetic feed)\n"
            "      --check-config        load and validate the config and check the\n"
            "                            directories and files it names, print the\n"
            "                            result, exit\n"
            "      --print-default-config  print the built-in default config as JSON, exit\n"
            "      --print-config-reference  print every config key (type, default, range,\n"
            "                            reloadable, meaning) as Markdown (README.md quotes it)\n"
            "      --log-level LEVEL     err|warning|notice|info|debug (overrides log_level)\n"
            "      --version             print the version and the backends built in, exit\n"
            "  -h, --help                print this help, exit\n"
            "\n"
            "Signals: SIGHUP reloads the config file (keys marked reloadable; an invalid\n"
            "file is rejected and the running config stays); SIGTERM or SIGINT stops\n"
            "intake, drains the queues, flushes the sinks and exits 0.\n"
            "Under systemd (Type=notify) it reports READY=1, STATUS=, WATCHDOG=1,\n"
            "RELOADING=1 and STOPPING=1. Exit status: 0 clean stop, 1 start failure or\n"
            "broken backend, 2 bad usage, 3 stopped but results were lost (logged),\n"
            "78 bad config (or a directory or file it names missing or not usable).\n",
            SS_CONFIG_DEFAULT_PATH);
}

static int file_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* Open files: the soft limit raised to the hard one (1024 by default
 * outside systemd's LimitNOFILE), so that peers that hog connections do
 * not leave the control socket and subscribers without a descriptor (at
 * the limit libzmq aborts the process). Logged when raised. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
        return;
    const rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
        SS_LOG(SS_LOG_INFO, TAG, "open files: soft limit raised from %llu to %llu",
               (unsigned long long)was, (unsigned long long)rl.rlim_max);
}

/* The daemon's CURVE key file (readable, with its secret key) and the
 * calibration files of every feed, readable and holding pipeline.roi when
 * one is set (ss_pipeline_check_calibration): 0, or -1 with a message
 * naming the file and key in err. */
static int check_files(const char *path, const ss_config_t *cfg, char *err, size_t n)
{
    ss_curve_key_t k;
    char why[480];
    if (cfg->curve_key[0] && ss_curve_read_key(cfg->curve_key, 1, &k, why, sizeof why) != 0) {
        snprintf(err, n, "%s: security.curve_key: %s", path, why);
        return -1;
    }
    for (int i = 0; i < cfg->n_feeds; i++) {
        char e[480];
        if (ss_pipeline_check_calibration(&cfg->feeds[i].pipeline, (ss_roi_t){ 0 }, e,
                                          sizeof e) != 0) {
            snprintf(err, n, "%s: feeds[%d].%s", path, i, e);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    /* before any thread exists (ZeroMQ's too): the main loop reads the
     * signals through a signalfd */
    ss_daemon_block_signals();
    ss_log_setup(SS_LOG_INFO, ss_log_prefix_wanted(SS_LOG_PREFIX_AUTO));
    /* OpenMP workers of the CPU backend sleep between frames instead of
     * spinning: the daemon shares its cores with its own source,
     * publisher and control threads (read at the first parallel region;
     * an OMP_WAIT_POLICY from the environment wins). */
    setenv("OMP_WAIT_POLICY", "passive", 0);

    const char *config_path = NULL;
    int check = 0, print_default = 0, print_reference = 0, log_level = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((strcmp(a, "--config") == 0 || strcmp(a, "-c") == 0) && i + 1 < argc) {
            config_path = argv[++i];
        } else if (strncmp(a, "--config=", 9) == 0) {
            config_path = a + 9;
        } else if (strcmp(a, "--check-config") == 0) {
            check = 1;
        } else if (strcmp(a, "--print-default-config") == 0) {
            print_default = 1;
        } else if (strcmp(a, "--print-config-reference") == 0) {
            print_reference = 1;
        } else if (strcmp(a, "--log-level") == 0 && i + 1 < argc) {
            if ((log_level = ss_log_level_parse(argv[++i])) < 0) {
                fprintf(stderr, "skysieved: unknown log level '%s'\n", argv[i]);
                return EXIT_USAGE;
            }
        } else if (strcmp(a, "--version") == 0) {
            printf("skysieved %s (backends: cpu%s)\n", SKYSIEVE_VERSION,
                   ss_backend_cuda_ops() ? ", cuda" : "");
            return 0;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "skysieved: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return EXIT_USAGE;
        }
    }

    if (print_reference) {
        char *md = ss_config_doc_markdown();
        if (!md)
            return 1;
        fputs(md, stdout);
        free(md);
        return 0;
    }
    ss_config_t *cfg = malloc(sizeof *cfg);
    if (!cfg) {
        fprintf(stderr, "skysieved: out of memory\n");
        return 1;
    }
    if (print_default) {
        ss_config_defaults(cfg);
        char *json = ss_config_to_json(cfg);
        free(cfg);
        if (!json)
            return 1;
        fputs(json, stdout);
        free(json);
        return 0;
    }

    int builtin = 0;
    if (!config_path) {
        config_path = SS_CONFIG_DEFAULT_PATH;
        builtin = !file_exists(config_path);
    }
    char err[600];
    if (builtin) {
        ss_config_defaults(cfg);
        SS_LOG(SS_LOG_NOTICE, TAG,
               "%s does not exist: running the built-in default config (one synthetic feed)",
               config_path);
    } else if (ss_config_load_checked(config_path, cfg, err, sizeof err) != SS_OK ||
               check_files(config_path, cfg, err, sizeof err) != 0) {
        if (check)          /* once, plainly, where a shell shows it */
            fprintf(stderr, "%s\n", err);
        else
            SS_LOG(SS_LOG_ERR, TAG, "%s", err);
        free(cfg);
        return EXIT_CONFIG;
    }
    if (check) {
        printf("%s: OK (%d feed%s)\n", builtin ? "built-in default config" : config_path,
               cfg->n_feeds, cfg->n_feeds == 1 ? "" : "s");
        free(cfg);
        return 0;
    }
    if (log_level >= 0)
        cfg->log_level = log_level;
    ss_log_setup(cfg->log_level, ss_log_prefix_wanted(cfg->log_prefix));

    raise_fd_limit();
    ss_daemon_t *d = ss_daemon_new(cfg, builtin ? "" : config_path);
    free(cfg);
    if (!d)
        return 1;
    d->log_level_override = log_level;
    int rc = ss_daemon_run(d);
    ss_daemon_destroy(&d);
    return rc;
}
