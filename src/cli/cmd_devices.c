/* cmd_devices.c — `deltallm devices`: the devices this build can compute on, by the names --device takes,
 * with their memory; --probe adds each one's copy bandwidth (the CPU's read probe of `bench`, a device's
 * copy kernel), the ceiling a decode's weight bandwidth is judged against. */
#include "backend/backend.h"
#include "cli/bwprobe.h"
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_DEVICES 17

int cmd_devices(int argc, char **argv) {
    bool probe = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--probe")) probe = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: deltallm devices [--probe]\n  lists the devices (--device NAME), with memory; --probe measures "
                   "each one's copy bandwidth (GB/s, bytes read + written)\n");
            return 0;
        } else {
            return cli_usage_error("devices", "unknown option '%s'", argv[i]);
        }
    }
    BackendDevice d[MAX_DEVICES];
    char note[600];
    const int n = backend_devices(&(BackendOptions){.device_lib = getenv("DELTALLM_VULKAN_LIB")}, d, MAX_DEVICES, note, sizeof note);
    for (int i = 0; i < n && i < MAX_DEVICES; i++) {
        printf("%-10s %8.1f GiB  %s", d[i].name, (double)d[i].memory_bytes / (1u << 30), d[i].desc);
        if (probe) {
            double gbs = 0;
            Err err = {{0}};
            if (!strcmp(d[i].name, "cpu")) {
                gbs = bwprobe_read_gbs((size_t)512 << 20, (int)sysconf(_SC_NPROCESSORS_ONLN), 3);
                printf("  read probe %.1f GB/s", gbs);
            } else if (backend_copy_probe(d[i].name, (size_t)1 << 30, &gbs, &err) == 0) {
                printf("  copy probe %.1f GB/s", gbs);
            } else {
                printf("  probe: %s", err.msg);
            }
        }
        printf("\n");
    }
    if (note[0]) printf("(%s)\n", note);
    return 0;
}
