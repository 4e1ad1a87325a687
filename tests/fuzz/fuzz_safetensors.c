/*
 * libFuzzer harness for the safetensors reader behind init.safetensors
 * (worker/stinit.c). The input is one .safetensors file: its header is
 * checked in memory (stinit_check_buffer), then the file is written under
 * $TMPDIR (or /tmp) and opened against a tiny Llama's tensor table (1
 * layer, width 4, 2 heads, 1 KV head, FFN 4, vocabulary 6) as a job's init
 * would be, and when accepted every float of the flat buffer is read. The
 * reader must refuse with a message or accept; reads stay inside the file
 * (AddressSanitizer). Anything else aborts.
 */
#include "stinit.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/llama_layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char s_dir[4096];
static model_tensor_t *s_table;
static int s_n;
static size_t s_np;

static void s_setup(void)
{
	if (s_dir[0])
		return;
	const char *tmp = getenv("TMPDIR");
	snprintf(s_dir, sizeof s_dir, "%s/fuzz-safetensors.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(s_dir))
		abort();
	model_config_t c = {.n_layer = 1, .n_head = 2, .n_embd = 4, .vocab_size = 6, .seq_len = 8,
			    .n_kv_head = 1, .ffn_dim = 4, .rope_theta = 10000, .norm_eps = 1e-5};
	size_t max_range;
	if (llama_layout(&c, &s_table, &s_n, &s_np, &max_range) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	s_setup();
	char err[1024] = "";
	int rc = stinit_check_buffer(data, size, "input", err, sizeof err);
	if (rc < 0 && !err[0])
		abort(); /* a refusal always says why */

	char path[4200];
	snprintf(path, sizeof path, "%s/model.safetensors", s_dir);
	FILE *f = fopen(path, "wb");
	if (!f)
		abort();
	if (size && fwrite(data, 1, size, f) != size)
		abort();
	fclose(f);
	for (int tied = 0; tied < 2; tied++) {
		stinit_t *st = NULL;
		err[0] = '\0';
		rc = stinit_open(s_dir, "model.safetensors", s_table, tied ? s_n - 1 : s_n, tied, &st, err,
				 sizeof err);
		if (rc < 0) {
			if (!err[0] || st)
				abort();
			continue;
		}
		float *out = malloc(s_np * sizeof *out);
		if (!out)
			abort();
		stinit_read_range(st, 0, s_np, out);
		stinit_read_range(st, 3, s_np / 2, out);
		free(out);
		stinit_free(st);
	}
	unlink(path);
	return 0;
}
