/* hostfirst devices [--json]: the backend census, the devices, and the effective default with its source.
 * An invalid HOSTFIRST_DEFAULT_DEVICE is an error (exit 1, one line on stderr), reported after the census
 * and the devices: the diagnostic still shows what is there when the default is what is wrong. */
#include <ctype.h>
#include <string.h>
#include "cli.h"

#define MAX_DEVICES 64

static int on_option(void *ctx, int id, const char *value) {
    (void)value;
    if (id == CLI_OPT_JSON) *(int *)ctx = 1;
    return 0;
}

/* The library's names are its constants without the prefix (LIBRARY_NOT_FOUND, BUILT_IN); the CLI prints them in
 * lower case (library_not_found, built_in). */
static const char *lower_name(const char *name, char *buf, size_t cap) {
    size_t i = 0;
    for (; name[i] && i + 1 < cap; i++) buf[i] = (char)tolower((unsigned char)name[i]);
    buf[i] = 0;
    return buf;
}

int cmd_devices(int argc, char **argv) {
    int json = 0;
    int rc = cli_parse("devices", argc, argv, &json, on_option, NULL);
    if (rc) return rc;
    /* The default is resolved first (its message is kept: later calls replace the thread's last error) and
     * reported last. */
    hostfirst_device def;
    hostfirst_default_source source = 0;
    uint32_t depth = 0;
    hostfirst_status def_st = hostfirst_default_device(&def, &source, &depth);
    char def_err[1024] = "";
    if (def_st != HOSTFIRST_STATUS_OK) snprintf(def_err, sizeof def_err, "%s", hostfirst_last_error_message());
    hostfirst_status st;

    size_t nwarn = hostfirst_census_warning_count();
    for (size_t i = 0; i < nwarn; i++) fprintf(stderr, "hostfirst: warning: %s\n", hostfirst_census_warning(i));

    hostfirst_device devs[MAX_DEVICES];
    size_t ndev = 0;
    st = hostfirst_devices(devs, MAX_DEVICES, &ndev);
    if (st != HOSTFIRST_STATUS_OK) return cli_fail("devices", st);

    char spec[64], b1[32], b2[32];
    size_t nb = hostfirst_backend_count();
    if (json) printf("{\"backends\":[");
    else printf("%-7s %-18s %-7s %-8s %s\n", "BACKEND", "STATUS", "DEVICES", "DRIVER", "REASON");
    for (size_t i = 0; i < nb; i++) {
        hostfirst_backend_info b = {.struct_size = sizeof b};
        st = hostfirst_backend_describe(i, &b);
        if (st != HOSTFIRST_STATUS_OK) return cli_fail("backend", st);
        char status_buf[64];
        const char *status = lower_name(hostfirst_backend_status_name(b.status), status_buf, sizeof status_buf);
        if (json) {
            printf("%s{\"name\":", i ? "," : "");
            cli_json_string(stdout, b.name);
            printf(",\"status\":\"%s\",\"reason\":", status);
            cli_json_string(stdout, b.reason);
            printf(",\"devices\":%u,\"driver_version\":", b.device_count);
            cli_json_string(stdout, b.driver_version);
            printf("}");
        } else {
            printf("%-7s %-18s %-7u %-8s %s\n", b.name, status, b.device_count,
                   b.driver_version[0] ? b.driver_version : "-", b.reason[0] ? b.reason : "-");
        }
    }
    if (json) printf("],\"devices\":[");
    else printf("\n%-10s %-34s %-12s %-12s %s\n", "DEVICE", "NAME", "TOTAL", "FREE", "DETAILS");
    for (size_t i = 0; i < ndev; i++) {
        hostfirst_device_info info;
        memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        st = hostfirst_device_describe(devs[i], &info);
        if (st != HOSTFIRST_STATUS_OK) return cli_fail("device", st);
        uint64_t free_b = 0, total_b = info.total_memory;
        /* For CUDA: NVML without a context where it answers, else the primary context (see the header). */
        st = hostfirst_device_memory(devs[i], &free_b, &total_b);
        if (st != HOSTFIRST_STATUS_OK) return cli_fail(cli_device_spec(devs[i], spec, sizeof spec), st);
        cli_device_spec(devs[i], spec, sizeof spec);
        int is_cuda = devs[i].kind == HOSTFIRST_DEVICE_CUDA;
        if (json) {
            printf("%s{\"spec\":\"%s\",\"kind\":\"%s\",\"name\":", i ? "," : "", spec, is_cuda ? "cuda" : "cpu");
            cli_json_string(stdout, info.name);
            printf(",\"total_memory\":%llu,\"free_memory\":%llu", (unsigned long long)total_b,
                   (unsigned long long)free_b);
            if (is_cuda) {
                printf(",\"uuid\":");
                cli_json_string(stdout, info.uuid);
                printf(",\"pci_bus_id\":");
                cli_json_string(stdout, info.pci_bus_id);
                printf(",\"compute_capability\":\"%d.%d\",\"multiprocessors\":%u", info.compute_capability_major,
                       info.compute_capability_minor, info.multiprocessor_count);
            }
            printf("}");
        } else {
            char details[160];
            if (is_cuda)
                snprintf(details, sizeof details, "%s  pci %s  sm_%d%d  %u SMs", info.uuid, info.pci_bus_id,
                         info.compute_capability_major, info.compute_capability_minor, info.multiprocessor_count);
            else
                snprintf(details, sizeof details, "%u logical CPUs", info.multiprocessor_count);
            printf("%-10s %-34.34s %-12s %-12s %s\n", spec, info.name, cli_bytes(total_b, b1, sizeof b1),
                   cli_bytes(free_b, b2, sizeof b2), details);
        }
    }
    if (def_st != HOSTFIRST_STATUS_OK) {
        if (json) {
            printf("],\"default\":null,\"default_error\":{\"status\":\"%s\",\"message\":", hostfirst_status_name(def_st));
            cli_json_string(stdout, def_err);
            printf("}}\n");
        } else {
            printf("\ndefault device: none (%s)\n", hostfirst_status_name(def_st));
        }
        fflush(stdout);
        fprintf(stderr, "hostfirst: default device: %s: %s\n", hostfirst_status_name(def_st), def_err);
        return 1;
    }
    char reads[256] = "?";
    size_t reads_len = 0;
    (void)hostfirst_read_engine(reads, sizeof reads, &reads_len); /* truncated if ever longer: display only */
    cli_device_spec(def, spec, sizeof spec);
    char source_buf[64];
    const char *source_name = lower_name(hostfirst_default_source_name(source), source_buf, sizeof source_buf);
    if (json) {
        printf("],\"default\":{\"spec\":\"%s\",\"source\":\"%s\"},\"reads\":", spec, source_name);
        cli_json_string(stdout, reads);
        printf("}\n");
    } else {
        printf("\ndefault device: %s (source: %s)\nreads: %s\n", spec, source_name, reads);
    }
    return 0;
}
