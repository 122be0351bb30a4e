/* Shared helpers for the `hostfirst` command-line program (public header only). */
#ifndef HOSTFIRST_CLI_H
#define HOSTFIRST_CLI_H

#include <stdint.h>
#include <stdio.h>
#include "hostfirst.h"

/* Prints `hostfirst: <what>: <STATUS>: <message>` on stderr and returns 1. */
int cli_fail(const char *what, hostfirst_status st);

/* Writes s as a JSON string literal (quotes included), escaping as RFC 8259 requires; UTF-8 is kept. */
void cli_json_string(FILE *out, const char *s);

/* Formats a device spec into buf (at least 32 bytes). */
const char *cli_device_spec(hostfirst_device d, char *buf, size_t cap);

/* Formats a byte count with binary units into buf. */
const char *cli_bytes(uint64_t n, char *buf, size_t cap);

/* Shared by `plan` (plan.c) and `load` (load.c): the parsed arguments, the open file, the rules and the plan. */
typedef struct {
    int json;
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

#endif
