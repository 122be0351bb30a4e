/* Shared helpers for the `hostfirst` command-line program (public header only). */
#ifndef HOSTFIRST_CLI_H
#define HOSTFIRST_CLI_H

#include <stdint.h>
#include <stdio.h>
/* The CLI ships with its library, so it may use the experimental tier (shard-on-read, census warnings). */
#define HOSTFIRST_EXPERIMENTAL
#include "hostfirst.h"

/* Prints `hostfirst: <what>: <STATUS>: <message>` on stderr and returns 1. */
int cli_fail(const char *what, hostfirst_status st);

/* Writes s as a JSON string literal (quotes included), escaping as RFC 8259 requires; UTF-8 is kept. */
void cli_json_string(FILE *out, const char *s);

/* Formats a device spec into buf (at least 32 bytes). */
const char *cli_device_spec(hostfirst_device d, char *buf, size_t cap);

/* Parses a whole decimal string as a non-negative integer into *out; returns 1 on success, 0 otherwise. */
int cli_parse_u64(const char *s, uint64_t *out);

/* Formats a byte count with binary units into buf. */
const char *cli_bytes(uint64_t n, char *buf, size_t cap);

/* Formats dims as "[a, b, c]" into buf (cut short, still NUL-terminated, if it does not fit). */
const char *cli_dims_text(const uint64_t *d, uint32_t rank, char *buf, size_t cap);

/* Output assembled in memory, in a buffer that grows as it is written, and written out only when everything
 * succeeded (no temporary file: msvcrt's tmpfile() creates its file in the root of the current drive, which
 * Windows refuses to users who are not administrators). Writing never fails on the spot: a failed allocation is
 * remembered (`oom`, the size asked in `oom_bytes`) and reported by cli_out_emit, which says what went wrong. */
typedef struct {
    char *text; /* NUL-terminated while len > 0 */
    size_t len, cap;
    int oom;
    size_t oom_bytes;
} cli_out;
void cli_out_printf(cli_out *o, const char *fmt, ...)
#if defined(__MINGW_PRINTF_FORMAT)
    __attribute__((format(__MINGW_PRINTF_FORMAT, 2, 3)))
#elif defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void cli_out_puts(cli_out *o, const char *s);
void cli_out_putc(cli_out *o, char c);
/* cli_json_string into the buffer. */
void cli_out_json_string(cli_out *o, const char *s);
/* Writes the buffer to stdout (and flushes it) and frees it. Returns 0, or 1 after one line on stderr saying what
 * failed: "hostfirst: <what>: OUT_OF_MEMORY: ..." when an allocation failed, "hostfirst: <what>: writing the
 * output failed: <the system's reason>" when stdout refused it (a full disk, a closed pipe). */
int cli_out_emit(cli_out *o, const char *what);
/* Frees the buffer without writing it. */
void cli_out_free(cli_out *o);

/* Options of every command, declared once in main.c's table (which the parser and the help both read). */
enum cli_option_id {
    CLI_OPT_JSON = 1,
    CLI_OPT_CHECKSUM,
    CLI_OPT_DEVICE,
    CLI_OPT_ROWS,
    CLI_OPT_RESIDENT,
    CLI_OPT_REPEAT,
    CLI_OPT_THREADS,
    CLI_OPT_STAGING_MIB,
    CLI_OPT_RULE,
    CLI_OPT_STRICT,
    CLI_OPT_BATCH,
    CLI_OPT_WINDOW,
    CLI_OPT_ITERS,
    CLI_OPT_SEED,
    CLI_OPT_PREFAULT,
    CLI_OPT_COPY_ON_WRITE,
    CLI_OPT_FROM_HOST,
    CLI_OPT_WORLD,
    CLI_OPT_RANK,
    CLI_OPT_DEPTH,
    CLI_OPT_MAX_PART_MIB,
    CLI_OPT_NO_SYNC,
    CLI_OPT_RAW,
    CLI_OPT_PAGE_CACHE,
};

#define CLI_REQUIRED 1u   /* the command needs it (shown without brackets) */
#define CLI_REPEATABLE 2u /* may be given more than once (shown with "...") */

typedef struct {
    int id;             /* enum cli_option_id; 0 ends a list */
    const char *name;   /* "--device" */
    const char *value;  /* what it takes ("SPEC"), NULL for a flag */
    const char *help;   /* one sentence; the help wraps it */
    unsigned flags;     /* CLI_REQUIRED, CLI_REPEATABLE */
} cli_option;

typedef struct {
    const char *name;           /* "put" */
    const char *operands;       /* "FILE TENSOR" */
    const char *summary;        /* one line */
    const cli_option *options;  /* ends with an entry whose name is NULL */
    int (*run)(int argc, char **argv);
} cli_command;

/* What a command returns after printing its --help (main turns it into exit status 0). */
#define CLI_HELP_SHOWN (-1)

/* Called for each option (with its value, or NULL for a flag); return 0 to go on, or an exit status (after
 * printing a message, e.g. with cli_usage_error). */
typedef int (*cli_on_option)(void *ctx, int id, const char *value);

/* Parses argv[1..] of command `cmd` against its table: `--opt VALUE` or `--opt=VALUE`, `--` ends options, a
 * lone `-` is an operand. The operands the table names ("FILE TENSOR") go to operands[0..] in order; a
 * missing or surplus one, an unknown option or a missing value is a usage error. Returns 0, CLI_HELP_SHOWN
 * (after printing the command's help for -h/--help), or what a callback returned. */
int cli_parse(const char *cmd, int argc, char **argv, void *ctx, cli_on_option on_option, const char **operands);

/* Prints "hostfirst CMD: <message>" and the command's usage on stderr; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
#if defined(__MINGW_PRINTF_FORMAT) /* MinGW: the printf the build uses (C99's with __USE_MINGW_ANSI_STDIO) */
    __attribute__((format(__MINGW_PRINTF_FORMAT, 2, 3)))
#elif defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* `--raw DTYPE[:SHAPE][@OFFSET]` (every command that opens a FILE): open it as a headerless file with
 * hostfirst_file_open_raw, one tensor named CLI_RAW_NAME, instead of recognising its format by content. */
#define CLI_RAW_NAME "data"
#define CLI_RAW_OPTION                                                                                       \
    {CLI_OPT_RAW, "--raw", "DTYPE[:SHAPE][@OFFSET]",                                                         \
     "FILE is headerless (nanoGPT's train.bin): one tensor '" CLI_RAW_NAME "' of DTYPE (U8, U16, I32, F32, "  \
     "BF16, ...; any case) and SHAPE (dimensions joined by ','; the first may be -1: as many rows as the file " \
     "holds; default -1) from byte OFFSET (default 0), as np.memmap(FILE, DTYPE, offset=OFFSET, shape=SHAPE) "  \
     "reads it; the file must hold exactly that",                                                             \
     0}

typedef struct {
    int set;                             /* --raw was given */
    hostfirst_dtype dtype;
    uint64_t shape[HOSTFIRST_MAX_RANK];  /* shape[0] may be HOSTFIRST_FILE_RAW_INFER */
    size_t rank;
    uint64_t offset;
} cli_raw;

/* Parses the value of --raw for command `cmd` into *out; returns 0, or a usage error's exit status (2) after
 * saying what is wrong. */
int cli_parse_raw(const char *cmd, const char *text, cli_raw *out);

/* `--page-cache keep|drop|bypass` (load, put, gather, shard): what the read leaves in the page cache (hostfirst_page_cache). */
#define CLI_PAGE_CACHE_OPTION                                                                                \
    {CLI_OPT_PAGE_CACHE, "--page-cache", "POLICY",                                                           \
     "keep (default: what the read brings into the page cache stays), drop (read through the cache, then "   \
     "drop the file's pages this read brought in) or bypass (direct I/O where the file system allows it, "    \
     "else as drop)",                                                                                        \
     0}

/* Parses the value of --page-cache for command `cmd` into *out; returns 0, or a usage error's exit status (2)
 * naming the option and the choices. */
int cli_parse_page_cache(const char *cmd, const char *text, hostfirst_page_cache *out);

/* Opens `path`: with hostfirst_file_open_raw when `raw` was given (raw->set), else with hostfirst_file_open
 * (recognised by content). Returns 0, or 1 after the failure line on stderr ("hostfirst: PATH: STATUS: message",
 * with the command-line form of the library's advice where there is one). */
int cli_open(const char *path, const cli_raw *raw, hostfirst_file **out);

/* Shared by `plan` (plan.c) and `load` (load.c): the parsed arguments, the open file, the rules and the plan. */
typedef struct {
    int json, strict;
    cli_raw raw;
    hostfirst_page_cache page_cache; /* load's --page-cache */
    const char *cmd; /* "plan" or "load" */
    const char *path;
    hostfirst_file *file;
    hostfirst_rules *rules;
    hostfirst_plan *plan;
} plan_args;

/* Parses the arguments, opens the file, adds the rules and makes the plan. Returns 0 or an exit status. */
int plan_setup(const char *cmd, int argc, char **argv, plan_args *a);
/* Frees what plan_setup made (also after it failed part-way). */
void plan_teardown(plan_args *a);
/* Prints the plan: a table, or the "tensors" and "devices" members of a JSON object (no braces); `seconds`
 * (may be NULL) adds a per-tensor time column. */
int plan_print(const plan_args *a, const double *seconds);

/* Subcommands: each returns the process exit status. argv[0] is the subcommand name. */
int cmd_devices(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_put(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_load(int argc, char **argv);
int cmd_gather(int argc, char **argv);
int cmd_shard(int argc, char **argv);
int cmd_convert(int argc, char **argv);

#endif
