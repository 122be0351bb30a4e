/* hostfirst: the command-line face of the library, written against the public C header only.
 *
 * Every command and option is declared once, in the table below: `cli_parse` accepts exactly what the table
 * lists, and `hostfirst --help` / `hostfirst CMD --help` print it, so the two cannot drift apart. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#ifdef _WIN32
#include <windows.h>
#endif

static const cli_option devices_options[] = {
    {CLI_OPT_JSON, "--json", NULL, "one JSON object instead of tables", 0},
    {0, NULL, NULL, NULL, 0},
};

static const cli_option inspect_options[] = {
    {CLI_OPT_JSON, "--json", NULL, "one JSON object instead of a table", 0},
    {CLI_OPT_CHECKSUM, "--checksum", NULL, "FNV-1a 64 of every tensor's bytes (reads all the data)", 0},
    CLI_RAW_OPTION,
    {0, NULL, NULL, NULL, 0},
};

static const cli_option put_options[] = {
    {CLI_OPT_DEVICE, "--device", "SPEC", "cpu, cpu:0, cuda, cuda:N, cuda:GPU-<uuid>, cuda_host (default: the default device)", 0},
    {CLI_OPT_ROWS, "--rows", "A:B", "only rows A..B (first dimension), a zero-copy slice", 0},
    {CLI_OPT_RESIDENT, "--resident", NULL, "register the file's pages with the driver instead of staging them", 0},
    {CLI_OPT_COPY_ON_WRITE, "--copy-on-write", NULL,
     "to cpu: map the tensor's pages privately instead of copying (the output says which the buffer got)", 0},
    {CLI_OPT_REPEAT, "--repeat", "N", "put N times (1..1000), each buffer freed before the next; report each and the best", 0},
    {CLI_OPT_THREADS, "--threads", "N", "reader threads (0..1024; 0: automatic)", 0},
    {CLI_OPT_STAGING_MIB, "--staging-mib", "M", "size of the pinned staging ring in MiB (0: automatic, 256)", 0},
    CLI_PAGE_CACHE_OPTION,
    CLI_RAW_OPTION,
    {CLI_OPT_JSON, "--json", NULL, "one JSON object instead of text", 0},
    {0, NULL, NULL, NULL, 0},
};

/* plan and load take the same options (load also --page-cache). */
#define RULES_OPTIONS                                                                                          \
    {CLI_OPT_RULE, "--rule", "PATTERN=TARGET",                                                                 \
     "first match wins; PATTERN globs tensor names (* ? [a-z] [!a-z]); TARGET is host (stay a zero-copy host " \
     "view), default (the default device), cpu, cuda:N or cuda_host; tensors no rule matches stay on the "      \
     "host, and a rule that matches no tensor is warned about",                                                \
     CLI_REPEATABLE},                                                                                          \
    {CLI_OPT_STRICT, "--strict", NULL,                                                                         \
     "strict mode: a rule that matches no tensor, or a tensor sent to the implicit default device, is an "     \
     "error",                                                                                                  \
     0},                                                                                                       \
    CLI_RAW_OPTION
static const cli_option load_options[] = {
    RULES_OPTIONS,
    CLI_PAGE_CACHE_OPTION,
    {CLI_OPT_JSON, "--json", NULL, "one JSON object instead of tables", 0},
    {0, NULL, NULL, NULL, 0},
};
static const cli_option rules_options[] = {
    RULES_OPTIONS,
    {CLI_OPT_JSON, "--json", NULL, "one JSON object instead of tables", 0},
    {0, NULL, NULL, NULL, 0},
};

static const cli_option gather_options[] = {
    {CLI_OPT_BATCH, "--batch", "B", "windows per batch", CLI_REQUIRED},
    {CLI_OPT_WINDOW, "--window", "T", "elements per window (at most the tensor's length)", CLI_REQUIRED},
    {CLI_OPT_DEVICE, "--device", "SPEC", "target device or 'default' (default: default)", 0},
    {CLI_OPT_ITERS, "--iters", "N", "batches to time (default 100)", 0},
    {CLI_OPT_SEED, "--seed", "S", "seed of the offset stream (default 1337)", 0},
    {CLI_OPT_PREFAULT, "--prefault", NULL,
     "map the tensor's pages first (hostfirst_view_prefault) and time it; a file truncated meanwhile raises SIGBUS",
     0},
    {CLI_OPT_FROM_HOST, "--from-host", NULL,
     "put the tensor to cpu first (timed apart) and gather from that copy: memcpy speed, no SIGBUS if the file "
     "is truncated",
     0},
    {CLI_OPT_DEPTH, "--depth", "D",
     "prefetch: a background thread fills up to D batches ahead (hostfirst_gather_stream_*); times the wait for "
     "each batch (default 0: each batch gathered when asked)",
     0},
    CLI_PAGE_CACHE_OPTION,
    CLI_RAW_OPTION,
    {CLI_OPT_JSON, "--json", NULL, "one JSON object instead of text", 0},
    {0, NULL, NULL, NULL, 0},
};

static const cli_option shard_options[] = {
    {CLI_OPT_WORLD, "--world", "W", "number of ranks: every rule's DIM is split evenly into W parts", CLI_REQUIRED},
    {CLI_OPT_RANK, "--rank", "R", "the rank whose shards this process loads (0..W-1)", CLI_REQUIRED},
    {CLI_OPT_RULE, "--rule", "PATTERN=DIM",
     "first match wins; PATTERN globs tensor names (* ? [a-z] [!a-z]; at most 1023 bytes); the tensors it matches "
     "are split along dimension DIM; tensors no rule matches are loaded whole, and a rule that splits no tensor "
     "is warned about",
     CLI_REQUIRED | CLI_REPEATABLE},
    {CLI_OPT_DEVICE, "--device", "SPEC", "where the shards go: cpu, cuda:N, cuda_host (default: cpu)", 0},
    {CLI_OPT_STRICT, "--strict", NULL, "a rule that splits no tensor is an error (else a warning)", 0},
    CLI_PAGE_CACHE_OPTION,
    CLI_RAW_OPTION,
    {CLI_OPT_JSON, "--json", NULL, "one JSON object instead of a table", 0},
    {0, NULL, NULL, NULL, 0},
};

static const cli_option convert_options[] = {
    {CLI_OPT_MAX_PART_MIB, "--max-part-mib", "M",
     "split the output into Hugging Face part files of at most M MiB of tensor data and an index (0: one file)", 0},
    {CLI_OPT_NO_SYNC, "--no-sync", NULL,
     "do not fsync (the output is still renamed into place, never written in place)", 0},
    {CLI_OPT_JSON, "--json", NULL, "one JSON object instead of text", 0},
    {0, NULL, NULL, NULL, 0},
};

static const cli_command commands[] = {
    {"devices", "", "backends (and why one is missing), devices, the default device and where it came from",
     devices_options, cmd_devices},
    {"inspect", "FILE",
     "format, tensors and metadata of a file of tensors: .safetensors, a *.safetensors.index.json set, NumPy .npy, "
     "an llm.c token shard, a Megatron dataset (.idx, .bin or their prefix), or a headerless file (--raw)",
     inspect_options, cmd_inspect},
    {"put", "FILE TENSOR", "put a tensor on a device, copy it back, verify it, time it", put_options, cmd_put},
    {"plan", "FILE", "where each tensor would go under the rules, per device bytes and whether they fit (a dry run: "
                     "nothing is allocated)",
     rules_options, cmd_plan},
    {"load", "FILE", "place the file by the rules (fit-checked before the first byte moves); per-tensor time",
     load_options, cmd_load},
    {"gather", "FILE TENSOR",
     "random [B, T] batches of a 1-D tensor (tokens: llm.c 'tokens', .npy or --raw 'data', Megatron 'tokens') onto a "
     "device, one transfer each; p50/p99",
     gather_options, cmd_gather},
    {"shard", "FILE", "load rank R's shards (shard-on-read: only their bytes are read); per tensor the global and "
                      "shard shapes, start, bytes read and FNV-1a 64 of the shard",
     shard_options, cmd_shard},
    {"convert", "INPUT OUTPUT",
     "write every tensor and the metadata of what hostfirst reads (a safetensors file, a set's index, ...) as "
     "safetensors: streamed, never a half-written OUTPUT",
     convert_options, cmd_convert},
    {NULL, NULL, NULL, NULL, NULL},
};

static const cli_command *find_command(const char *name) {
    for (const cli_command *c = commands; c->name; c++)
        if (!strcmp(c->name, name)) return c;
    return NULL;
}

#define WIDTH 100

/* Writes the words of `text` from column `col` (after a space when `sep`), breaking lines before WIDTH and
 * indenting continuations to `indent`; returns the column after it. */
static int put_words(FILE *out, int col, int indent, int sep, const char *text) {
    while (*text) {
        while (*text == ' ') text++;
        size_t n = strcspn(text, " ");
        if (n == 0) break;
        if (sep && col + 1 + (int)n > WIDTH) {
            fprintf(out, "\n%*s", indent, "");
            col = indent;
        } else if (sep) {
            fputc(' ', out);
            col++;
        }
        sep = 1;
        fwrite(text, 1, n, out);
        col += (int)n;
        text += n;
    }
    return col;
}

/* "hostfirst put FILE TENSOR [--device SPEC] [--rows A:B] ...", wrapped under the operands. */
static void print_synopsis(FILE *out, int col, const cli_command *c) {
    char word[96];
    snprintf(word, sizeof word, "hostfirst %s", c->name);
    col += fprintf(out, "%s", word);
    int indent = col + 1;
    col = put_words(out, col, indent, 1, c->operands);
    for (const cli_option *o = c->options; o->name; o++) {
        int req = o->flags & CLI_REQUIRED, rep = o->flags & CLI_REPEATABLE;
        snprintf(word, sizeof word, "%s%s%s%s%s%s", req ? "" : "[", o->name, o->value ? " " : "",
                 o->value ? o->value : "", req ? "" : "]", rep ? " ..." : "");
        if (col + 1 + (int)strlen(word) > WIDTH) {
            fprintf(out, "\n%*s", indent, "");
            col = indent;
        } else {
            fputc(' ', out);
            col++;
        }
        col += fprintf(out, "%s", word);
    }
    fputc('\n', out);
}

static void print_option(FILE *out, const char *lhs, const char *help) {
    int col = fprintf(out, "      %-22s", lhs);
    if (col > 28) /* a long option and its value: the help starts on the next line, in its column */
        put_words(out, fprintf(out, "\n%*s", 29, "") - 1, 29, 0, help);
    else
        put_words(out, col, 29, 1, help);
    fputc('\n', out);
}

static void print_options(FILE *out, const cli_command *c) {
    for (const cli_option *o = c->options; o->name; o++) {
        char lhs[64];
        snprintf(lhs, sizeof lhs, "%s%s%s", o->name, o->value ? " " : "", o->value ? o->value : "");
        print_option(out, lhs, o->help);
    }
    print_option(out, "-h, --help", "this command's help");
}

static void print_footer(FILE *out, int files) {
    fputc('\n', out);
    if (files)
        fprintf(out,
                "files: FILE is recognised by content: a .safetensors file, a *.safetensors.index.json set, a NumPy\n"
                "       .npy file (tensor 'data'), an llm.c token shard ('tokens'), a Megatron dataset (its .idx, .bin\n"
                "       or their prefix: 'tokens', 'sequence_lengths', ...); a headerless file (nanoGPT's train.bin)\n"
                "       needs --raw DTYPE[:SHAPE][@OFFSET] (tensor 'data'), e.g. --raw U16\n");
    fprintf(out,
            "environment: HOSTFIRST_PLATFORMS (e.g. cpu), HOSTFIRST_DEFAULT_DEVICE (e.g. cuda:1),\n"
            "             CUDA_VISIBLE_DEVICES\n"
            "exit status: 0 success, 1 failure (one line on stderr: hostfirst: WHAT: STATUS: message),\n"
            "             2 usage error\n");
}

static void print_command_help(FILE *out, const cli_command *c) {
    print_synopsis(out, fprintf(out, "usage: "), c);
    fputc('\n', out);
    put_words(out, 0, 0, 0, c->summary);
    fprintf(out, "\n\noptions:\n");
    print_options(out, c);
    print_footer(out, strstr(c->operands, "FILE") != NULL);
}

static int usage(FILE *out) {
    fprintf(out,
            "usage: hostfirst <command> [options]\n"
            "       hostfirst <command> --help      one command's help (also: hostfirst help <command>)\n"
            "       hostfirst --version\n"
            "\n"
            "commands:\n");
    for (const cli_command *c = commands; c->name; c++) {
        print_synopsis(out, fprintf(out, "  "), c);
        put_words(out, fprintf(out, "    "), 4, 0, c->summary);
        fputc('\n', out);
        print_options(out, c);
    }
    print_footer(out, 1);
    return out == stderr ? 2 : 0;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "hostfirst %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    const cli_command *c = find_command(cmd);
    if (c) print_synopsis(stderr, fprintf(stderr, "usage: "), c);
    fprintf(stderr, "       hostfirst %s --help\n", cmd);
    return 2;
}

int cli_parse(const char *cmd, int argc, char **argv, void *ctx, cli_on_option on_option, const char **operands) {
    const cli_command *c = find_command(cmd);
    /* The operands the table names ("FILE TENSOR"), in order. */
    char names[64];
    const char *name[4];
    size_t want = 0, got = 0;
    snprintf(names, sizeof names, "%s", c->operands);
    for (char *w = strtok(names, " "); w && want < 4; w = strtok(NULL, " ")) name[want++] = w;
    int options_done = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (options_done || a[0] != '-' || a[1] == '\0') {
            if (got == want) return cli_usage_error(cmd, "unexpected argument '%s'", a);
            operands[got++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            options_done = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            print_command_help(stdout, c);
            return CLI_HELP_SHOWN;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const cli_option *o = c->options;
        while (o->name && !(strlen(o->name) == len && !strncmp(o->name, a, len))) o++;
        if (!o->name) return cli_usage_error(cmd, "unknown option '%s'", a);
        const char *value = NULL;
        if (o->value) {
            if (eq) value = eq + 1;
            else if (i + 1 < argc) value = argv[++i];
            else return cli_usage_error(cmd, "%s needs a value (%s)", o->name, o->value);
        } else if (eq) {
            return cli_usage_error(cmd, "%s takes no value", o->name);
        }
        int rc = on_option(ctx, o->id, value);
        if (rc) return rc;
    }
    if (got < want) return cli_usage_error(cmd, "%s is missing", name[got]);
    return 0;
}

static int run(int argc, char **argv) {
    if (!HOSTFIRST_VERSION_COMPATIBLE(HOSTFIRST_VERSION_NUMBER, hostfirst_version_number())) {
        fprintf(stderr, "hostfirst: built against header version %d, which library version %u does not serve\n",
                HOSTFIRST_VERSION_NUMBER, hostfirst_version_number());
        return 1;
    }
    if (argc < 2) return usage(stderr);
    const char *name = argv[1];
    if (!strcmp(name, "-h") || !strcmp(name, "--help")) return usage(stdout);
    if (!strcmp(name, "help")) {
        if (argc < 3) return usage(stdout);
        const cli_command *c = find_command(argv[2]);
        if (!c) {
            fprintf(stderr, "hostfirst: unknown command '%s'\n", argv[2]);
            return usage(stderr);
        }
        print_command_help(stdout, c);
        return 0;
    }
    if (!strcmp(name, "--version")) {
        printf("hostfirst %s\n", hostfirst_version());
        return 0;
    }
    const cli_command *c = find_command(name);
    if (!c) {
        fprintf(stderr, "hostfirst: unknown command '%s'\n", name);
        return usage(stderr);
    }
    int rc = c->run(argc - 1, argv + 1);
    return rc == CLI_HELP_SHOWN ? 0 : rc;
}

#ifdef _WIN32
/* Windows hands main() its arguments in the ANSI code page, which holds few of the characters a file name may have
 * (é in some, Chinese or Cyrillic in others: the rest become '?'), while the library takes UTF-8 paths. So the CLI
 * is a wmain (cli/build.sh links it with -municode for Windows): the arguments come as UTF-16 and are converted to
 * UTF-8 here. Its output is UTF-8 too; on a console the output code page is set to UTF-8 while it runs. */
static UINT console_cp;

static void restore_console_cp(void) { SetConsoleOutputCP(console_cp); }

int wmain(int argc, wchar_t **wargv) {
    char **argv = calloc((size_t)argc + 1, sizeof *argv);
    if (!argv) {
        fputs("hostfirst: out of memory converting the command line to UTF-8\n", stderr);
        return 1;
    }
    for (int i = 0; i < argc; i++) {
        /* WC_ERR_INVALID_CHARS: a name with an unpaired surrogate (possible on NTFS) has no UTF-8 form. */
        int n = WideCharToMultiByte(CP_UTF8, WC_ERR_INVALID_CHARS, wargv[i], -1, NULL, 0, NULL, NULL);
        if (n <= 0 || !(argv[i] = malloc((size_t)n)) ||
            WideCharToMultiByte(CP_UTF8, WC_ERR_INVALID_CHARS, wargv[i], -1, argv[i], n, NULL, NULL) != n) {
            DWORD e = GetLastError();
            fprintf(stderr, "hostfirst: argument %d cannot be converted to UTF-8 (%s, Windows error %lu)\n", i,
                    e == ERROR_NO_UNICODE_TRANSLATION ? "it is not valid UTF-16" : "out of memory",
                    (unsigned long)e);
            return 1;
        }
    }
    console_cp = GetConsoleOutputCP();
    if (console_cp != 0 && console_cp != CP_UTF8 && SetConsoleOutputCP(CP_UTF8)) atexit(restore_console_cp);
    return run(argc, argv); /* argv lives until the process ends */
}
#else
int main(int argc, char **argv) { return run(argc, argv); }
#endif
