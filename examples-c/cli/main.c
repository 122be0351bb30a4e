/* hostfirst: the command-line face of the library, written against the public C header only. */
#include <string.h>
#include "cli.h"

static int usage(FILE *out) {
    fprintf(out,
            "usage: hostfirst <command> [options]\n"
            "\n"
            "commands:\n"
            "  devices [--json]     backends (and why one is missing), devices, the default device\n"
            "  inspect FILE [--json] [--checksum]\n"
            "                       tensors and metadata of a .safetensors file or *.index.json set\n"
            "  put FILE TENSOR [--device SPEC] [--rows A:B] [--json]\n"
            "                       put a tensor on a device, copy it back, verify, time it\n"
            "  plan FILE --rule PATTERN=TARGET ... [--json]\n"
            "                       where each tensor would go (first match wins; unmatched stay on the host)\n"
            "  load FILE --rule PATTERN=TARGET ... [--json]\n"
            "                       place the file by the rules; per-tensor placement and time\n"
            "  gather FILE TENSOR --batch B --window T [--device SPEC] [--iters N] [--seed S] [--json]\n"
            "                       random [B, T] batches of a 1-D tensor onto a device; p50/p99 per batch\n"
            "  shard FILE --world W --rank R --rule PATTERN=DIM ... [--device SPEC] [--json]\n"
            "                       load rank R's shards (DIM split W ways; unmatched tensors whole), reading\n"
            "                       only their bytes; per tensor shapes, start, checksum, bytes read\n"
            "\n"
            "environment: HOSTFIRST_PLATFORMS (e.g. cpu), HOSTFIRST_DEFAULT_DEVICE (e.g. cuda:1),\n"
            "             CUDA_VISIBLE_DEVICES\n");
    return out == stderr ? 2 : 0;
}

int main(int argc, char **argv) {
    if (hostfirst_version_number() != HOSTFIRST_VERSION_NUMBER) {
        fprintf(stderr, "hostfirst: header version %d does not match library version %u\n",
                HOSTFIRST_VERSION_NUMBER, hostfirst_version_number());
        return 1;
    }
    if (argc < 2) return usage(stderr);
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) return usage(stdout);
    if (!strcmp(cmd, "--version")) {
        printf("hostfirst %s\n", hostfirst_version());
        return 0;
    }
    if (!strcmp(cmd, "devices")) return cmd_devices(argc - 1, argv + 1);
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(cmd, "put")) return cmd_put(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan")) return cmd_plan(argc - 1, argv + 1);
    if (!strcmp(cmd, "load")) return cmd_load(argc - 1, argv + 1);
    if (!strcmp(cmd, "gather")) return cmd_gather(argc - 1, argv + 1);
    if (!strcmp(cmd, "shard")) return cmd_shard(argc - 1, argv + 1);
    fprintf(stderr, "hostfirst: unknown command '%s'\n", cmd);
    return usage(stderr);
}
