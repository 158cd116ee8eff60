/*
 * standalone_main.c — runs a fuzz target's LLVMFuzzerTestOneInput over
 * files, without libFuzzer: every argument is a file or a directory of
 * files (the seed corpus, and the inputs that once crashed, kept as
 * regression cases). What the ordinary build and ctest use; the fuzzing
 * build (SKYSIEVE_FUZZ=ON, clang) links libFuzzer's main instead.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One file through the target; 0, or -1 when it cannot be read. */
static int run_file(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return -1;
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(fp);
                return -1;
            }
            buf = nb;
        }
        const size_t got = fread(buf + n, 1, cap - n, fp);
        n += got;
        if (got == 0)
            break;
    }
    fclose(fp);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "%s: cannot read\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(sb.st_mode)) {
            if (run_file(argv[i]) != 0)
                return 1;
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        for (struct dirent *e; d && (e = readdir(d));) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            if (run_file(path) != 0) {
                closedir(d);
                return 1;
            }
            files++;
        }
        if (d)
            closedir(d);
    }
    printf("%d inputs ran\n", files);
    return files > 0 ? 0 : 1;
}
