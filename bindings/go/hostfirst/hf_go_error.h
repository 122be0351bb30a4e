// The C side of the package's errors, included by the preamble of every file that calls the library.
#ifndef HF_GO_ERROR_H
#define HF_GO_ERROR_H

#include <stdlib.h>
#include <string.h>
#include <hostfirst.h>

// What a failed call left on its thread: the message and, when a fit check refused the call, its numbers.
// The library keeps both per OS thread and a goroutine may change threads between two cgo calls, so every
// shim takes them in the same cgo call as the call that failed (hf_go_error_take), and Go frees the copy (check).
typedef struct hf_go_error {
	char *message;
	int has_fit;
	hostfirst_fit_info fit;
} hf_go_error;

// The copy of the failure of a call that returned st (NULL on success; free both with hf_go_error_free). The
// thread's last error is that call's when its status is st (the last-error family's rule).
static inline hf_go_error *hf_go_error_take(hostfirst_status st) {
	if (st == HOSTFIRST_STATUS_OK) return NULL;
	hf_go_error *e = (hf_go_error *)calloc(1, sizeof *e);
	if (e == NULL) return NULL;
	int ours = hostfirst_last_error_status() == st;
	e->message = strdup(ours ? hostfirst_last_error_message() : "(the library kept no message for this failure)");
	e->fit.struct_size = sizeof e->fit;
	e->has_fit = ours && st == HOSTFIRST_STATUS_OUT_OF_MEMORY && hostfirst_last_error_fit(&e->fit) == HOSTFIRST_STATUS_OK;
	return e;
}

static inline void hf_go_error_free(hf_go_error *e) {
	if (e == NULL) return;
	free(e->message);
	free(e);
}

#endif
