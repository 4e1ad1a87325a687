/*
 * jobspec_model: the job spec's model section, for both architectures.
 *
 * GPT-2 ("arch": "gpt2", the default) has six fields; Llama ("arch":
 * "llama") adds grouped-query attention (n_kv_head), the SwiGLU width
 * (ffn_dim, or Llama's rule from n_embd), RoPE (rope_theta and Llama 3.1's
 * rope_scaling), the RMSNorm epsilon and tied embeddings. A named preset
 * ("preset": "llama3.2-1b") fills a published shape, and every field the
 * user writes overrides the preset's. Llama's fields are refused for GPT-2
 * by name, so a GPT-2 spec reads, and renders, exactly as before.
 *
 * The order is jobspec.c's: unknown keys, then each field against its type
 * and range (here), then the rules tying fields together
 * (jobspec_model_check, after the whole document was read, since the
 * vocabulary's bound depends on data.format).
 */
#include "jobspec_internal.h"

/* Defaults of both architectures (docs/jobspec.md has the same table). */
#define DEFAULT_N_LAYER 6
#define DEFAULT_N_HEAD 6
#define DEFAULT_N_EMBD 384
#define DEFAULT_VOCAB_SIZE 256
#define DEFAULT_SEQ_LEN 256
/* Llama's own (arch "llama" without a preset) */
#define DEFAULT_N_KV_HEAD 2 /* with the default n_head; an explicit n_head's own value otherwise */
#define DEFAULT_ROPE_THETA 500000.0
#define DEFAULT_NORM_EPS 1e-5
#define DEFAULT_MULTIPLE_OF 256

/* Bounds not in the header (docs/jobspec.md states them all). */
#define MAX_FFN_DIM (8 * JOBSPEC_MAX_EMBD)
#define MAX_ROPE_THETA 1e12
#define MAX_ROPE_FACTOR 1024.0
#define MAX_FREQ_FACTOR 1e6
#define MAX_NORM_EPS 1.0
#define MAX_FFN_MULTIPLIER 16.0
#define MAX_MULTIPLE_OF 65536
#define MAX_UINT16_VOCAB 65536 /* nanogpt stores tokens as uint16 */
#define MAX_TEXT_VOCAB 256     /* text is read as bytes */

static const char *const s_arch_names[] = {"gpt2", "llama"};

static const char *const s_model_keys[] = {
	"arch", "n_layer", "n_head", "n_embd", "vocab_size", "seq_len", "preset", "n_kv_head",
	"ffn_dim", "ffn_dim_multiplier", "multiple_of", "rope_theta", "rope_scaling", "norm_eps",
	"tie_embeddings", NULL};
/* The keys only Llama has, refused for GPT-2. */
static const char *const s_llama_keys[] = {
	"preset", "n_kv_head", "ffn_dim", "ffn_dim_multiplier", "multiple_of", "rope_theta",
	"rope_scaling", "norm_eps", "tie_embeddings", NULL};
static const char *const s_rope_scaling_keys[] = {
	"factor", "low_freq_factor", "high_freq_factor", "original_max_position", NULL};

/* A published shape: what "preset" expands to before the explicit fields. */
typedef struct {
	const char *name;
	int n_layer, n_embd, n_head, n_kv_head, ffn_dim, vocab_size, seq_len;
	double rope_theta;
	double factor, low_freq_factor, high_freq_factor; /* factor 0: no scaling */
	int original_max_position;
	int tie_embeddings;
} s_preset_t;

/* Meta's published configurations (Llama 3.2 1B/3B, 3.1 8B), and the
 * 124M-class shape bench/ measures. */
static const s_preset_t s_presets[] = {
	{"llama3.2-1b", 16, 2048, 32, 8, 8192, 128256, 2048, 500000.0, 32.0, 1.0, 4.0, 8192, 1},
	{"llama3.2-3b", 28, 3072, 24, 8, 8192, 128256, 2048, 500000.0, 32.0, 1.0, 4.0, 8192, 1},
	{"llama3.1-8b", 32, 4096, 32, 8, 14336, 128256, 2048, 500000.0, 8.0, 1.0, 4.0, 8192, 0},
	{"llama-124m", 12, 768, 12, 4, 2048, 32000, 1024, 500000.0, 0.0, 0.0, 0.0, 0, 0},
};

/* Llama's SwiGLU width rule (Meta's model.py): 2/3 of 4C, times the
 * multiplier when given, rounded up to a multiple of multiple_of. */
static int64_t s_ffn_rule(int n_embd, double multiplier, int64_t multiple_of)
{
	int64_t hidden = (int64_t)(2 * (4 * (int64_t)n_embd) / 3);
	if (multiplier > 0)
		hidden = (int64_t)(multiplier * (double)hidden);
	return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

static int s_get_bool(const json_t *obj, const char *section, const char *key, int def,
		      int *ret, jobspec_error_t *err)
{
	const json_t *v = obj ? json_object_get(obj, key) : NULL;
	if (!v) {
		*ret = def;
		return 0;
	}
	if (json_is_boolean(v)) {
		*ret = json_is_true(v) ? 1 : 0;
		return 0;
	}
	char got[64];
	s_describe(v, got, sizeof(got));
	s_field_name_t f = s_field(section, key);
	return s_fail(err, f.pointer, "%s must be true or false (got %s)", f.dotted, got);
}

/* "preset": NULL when absent, else the table's row. */
static int s_get_preset(const json_t *m, const s_preset_t **ret, jobspec_error_t *err)
{
	const json_t *v = m ? json_object_get(m, "preset") : NULL;
	*ret = NULL;
	if (!v)
		return 0;
	for (size_t i = 0; json_is_string(v) && i < N_ELEMS(s_presets); i++) {
		if (strcmp(json_string_value(v), s_presets[i].name) == 0 &&
		    json_string_length(v) == strlen(s_presets[i].name)) {
			*ret = &s_presets[i];
			return 0;
		}
	}
	char got[64], list[160] = "";
	size_t used = 0;
	for (size_t i = 0; i < N_ELEMS(s_presets); i++) {
		int n = snprintf(list + used, sizeof(list) - used, "%s\"%s\"", i ? ", " : "",
				 s_presets[i].name);
		if (n < 0 || (size_t)n >= sizeof(list) - used)
			break;
		used += (size_t)n;
	}
	s_describe(v, got, sizeof(got));
	return s_fail(err, "/model/preset", "model.preset must be one of %s (got %s)", list, got);
}

/* rope_scaling: absent (the preset's or none), null (none) or an object
 * with all four fields. */
static int s_read_rope_scaling(const json_t *m, const s_preset_t *p, jobspec_t *s,
			       jobspec_error_t *err)
{
	const json_t *o = m ? json_object_get(m, "rope_scaling") : NULL;
	if (!o) {
		if (p && p->factor > 0) {
			s->model.rope_scaling.factor = p->factor;
			s->model.rope_scaling.low_freq_factor = p->low_freq_factor;
			s->model.rope_scaling.high_freq_factor = p->high_freq_factor;
			s->model.rope_scaling.original_max_position = p->original_max_position;
		}
		return 0;
	}
	if (json_is_null(o))
		return 0;
	if (!json_is_object(o)) {
		char got[64];
		s_describe(o, got, sizeof(got));
		return s_fail(err, "/model/rope_scaling",
			      "model.rope_scaling must be null or an object with factor, low_freq_factor,"
			      " high_freq_factor and original_max_position (got %s)", got);
	}
	TRY(s_check_keys(o, "model/rope_scaling", s_rope_scaling_keys, err));
	for (const char *const *k = s_rope_scaling_keys; *k; k++) {
		if (!json_object_get(o, *k)) {
			char pointer[64];
			snprintf(pointer, sizeof(pointer), "/model/rope_scaling/%s", *k);
			return s_fail(err, pointer,
				      "model.rope_scaling.%s is required: rope_scaling needs factor,"
				      " low_freq_factor, high_freq_factor and original_max_position"
				      " (Llama 3.1: 8, 1, 4, 8192)", *k);
		}
	}
	int64_t v;
	TRY(s_get_real(o, "model/rope_scaling", "factor", 1.0, false, MAX_ROPE_FACTOR, 0,
		       &s->model.rope_scaling.factor, err));
	TRY(s_get_real(o, "model/rope_scaling", "low_freq_factor", 0.0, true, MAX_FREQ_FACTOR, 0,
		       &s->model.rope_scaling.low_freq_factor, err));
	TRY(s_get_real(o, "model/rope_scaling", "high_freq_factor", 0.0, true, MAX_FREQ_FACTOR, 0,
		       &s->model.rope_scaling.high_freq_factor, err));
	TRY(s_get_int(o, "model/rope_scaling", "original_max_position", 1, JOBSPEC_MAX_SEQ_LEN, 0,
		      &v, err));
	s->model.rope_scaling.original_max_position = (int)v;
	return 0;
}

/* The Llama-only fields, with the preset's (or Llama's) defaults. */
static int s_read_llama(const json_t *m, const s_preset_t *p, jobspec_t *s, jobspec_error_t *err)
{
	int64_t v;
	double mult = 0;
	const bool head_given = m && json_object_get(m, "n_head");
	const int64_t kv_def = p ? p->n_kv_head : head_given ? s->model.n_head : DEFAULT_N_KV_HEAD;
	TRY(s_get_int(m, "model", "n_kv_head", 1, JOBSPEC_MAX_HEADS, kv_def, &v, err));
	s->model.n_kv_head = (int)v;

	const bool ffn_given = m && json_object_get(m, "ffn_dim");
	const bool rule_given = m && (json_object_get(m, "ffn_dim_multiplier") ||
				      json_object_get(m, "multiple_of"));
	if (ffn_given && rule_given)
		return s_fail(err, json_object_get(m, "multiple_of") ? "/model/multiple_of"
								      : "/model/ffn_dim_multiplier",
			      "model.ffn_dim_multiplier and model.multiple_of compute model.ffn_dim from"
			      " model.n_embd; give either model.ffn_dim or the rule's fields, not both");
	TRY(s_get_real(m, "model", "ffn_dim_multiplier", 0.0, true, MAX_FFN_MULTIPLIER, 0, &mult, err));
	int64_t multiple_of;
	TRY(s_get_int(m, "model", "multiple_of", 1, MAX_MULTIPLE_OF, DEFAULT_MULTIPLE_OF, &multiple_of,
		      err));
	const int64_t ffn_def = p && !rule_given ? p->ffn_dim
						 : s_ffn_rule(s->model.n_embd, mult, multiple_of);
	if (!ffn_given && (ffn_def < 1 || ffn_def > MAX_FFN_DIM))
		return s_fail(err, "/model/n_embd",
			      "model.ffn_dim from Llama's rule (%" PRId64 " for model.n_embd %d) must be"
			      " between 1 and %d; give model.ffn_dim", ffn_def, s->model.n_embd,
			      MAX_FFN_DIM);
	TRY(s_get_int(m, "model", "ffn_dim", 1, MAX_FFN_DIM, ffn_def, &v, err));
	s->model.ffn_dim = (int)v;

	TRY(s_get_real(m, "model", "rope_theta", 0.0, true, MAX_ROPE_THETA,
		       p ? p->rope_theta : DEFAULT_ROPE_THETA, &s->model.rope_theta, err));
	TRY(s_read_rope_scaling(m, p, s, err));
	TRY(s_get_real(m, "model", "norm_eps", 0.0, true, MAX_NORM_EPS, DEFAULT_NORM_EPS,
		       &s->model.norm_eps, err));
	TRY(s_get_bool(m, "model", "tie_embeddings", p ? p->tie_embeddings : 0,
		       &s->model.tie_embeddings, err));
	if (p)
		snprintf(s->model.preset, sizeof(s->model.preset), "%s", p->name);
	return 0;
}

int jobspec_model_read(const json_t *doc, jobspec_t *s, jobspec_error_t *err)
{
	const json_t *m = NULL;
	const s_preset_t *p;
	int64_t v;
	int e = 0;
	TRY(s_get_section(doc, "model", s_model_keys, &m, err));
	TRY(s_get_preset(m, &p, err));
	/* a preset is a Llama shape: arch defaults to llama with one */
	TRY(s_get_enum(m, "model", "arch", s_arch_names, N_ELEMS(s_arch_names), p ? 1 : 0, &e, err));
	snprintf(s->model.arch, sizeof(s->model.arch), "%s", s_arch_names[e]);
	const bool llama = e == 1;
	if (!llama) {
		for (const char *const *k = s_llama_keys; *k; k++) {
			if (!m || !json_object_get(m, *k))
				continue;
			s_field_name_t f = s_field("model", *k);
			return s_fail(err, f.pointer,
				      "%s is a Llama field: set model.arch to \"llama\" or leave %s out"
				      " (model.arch is \"gpt2\"%s)", f.dotted, f.dotted,
				      json_object_get(m, "arch") ? "" : ", the default");
		}
	}
	TRY(s_get_int(m, "model", "n_layer", 1, JOBSPEC_MAX_LAYERS, p ? p->n_layer : DEFAULT_N_LAYER,
		      &v, err));
	s->model.n_layer = (int)v;
	TRY(s_get_int(m, "model", "n_head", 1, JOBSPEC_MAX_HEADS, p ? p->n_head : DEFAULT_N_HEAD, &v,
		      err));
	s->model.n_head = (int)v;
	TRY(s_get_int(m, "model", "n_embd", 1, JOBSPEC_MAX_EMBD, p ? p->n_embd : DEFAULT_N_EMBD, &v,
		      err));
	s->model.n_embd = (int)v;
	TRY(s_get_int(m, "model", "vocab_size", 1, JOBSPEC_MAX_VOCAB,
		      p ? p->vocab_size : DEFAULT_VOCAB_SIZE, &v, err));
	s->model.vocab_size = (int)v;
	TRY(s_get_int(m, "model", "seq_len", 1, JOBSPEC_MAX_SEQ_LEN, p ? p->seq_len : DEFAULT_SEQ_LEN,
		      &v, err));
	s->model.seq_len = (int)v;
	if (llama)
		TRY(s_read_llama(m, p, s, err));
	return 0;
}

/* " (the default)" or " (the preset's)" after a value the user did not write. */
static const char *s_whose(const json_t *doc, const jobspec_t *s, const char *key)
{
	if (s_has(doc, "model", key))
		return "";
	return s->model.preset[0] ? ", the preset's" : ", the default";
}

int jobspec_model_check(const json_t *doc, const jobspec_t *s, jobspec_error_t *err)
{
	const bool llama = strcmp(s->model.arch, "llama") == 0;
	if (s->model.n_embd % s->model.n_head != 0) {
		bool head_given = s_has(doc, "model", "n_head") || !s_has(doc, "model", "n_embd");
		return s_fail(err, head_given ? "/model/n_head" : "/model/n_embd",
			      "model.n_embd (%d%s) must be divisible by model.n_head (%d%s)",
			      s->model.n_embd, s_whose(doc, s, "n_embd"), s->model.n_head,
			      s_whose(doc, s, "n_head"));
	}
	if (llama && s->model.n_head % s->model.n_kv_head != 0) {
		bool kv_given = s_has(doc, "model", "n_kv_head") || !s_has(doc, "model", "n_head");
		return s_fail(err, kv_given ? "/model/n_kv_head" : "/model/n_head",
			      "model.n_head (%d%s) must be a multiple of model.n_kv_head (%d%s): each"
			      " key/value head serves the same number of query heads",
			      s->model.n_head, s_whose(doc, s, "n_head"), s->model.n_kv_head,
			      s_whose(doc, s, "n_kv_head"));
	}
	if (llama && (s->model.n_embd / s->model.n_head) % 2 != 0)
		return s_fail(err, s_has(doc, "model", "n_head") ? "/model/n_head" : "/model/n_embd",
			      "model.n_embd / model.n_head (%d / %d = %d) must be even: rotary embeddings"
			      " turn pairs of the head's dimensions",
			      s->model.n_embd, s->model.n_head, s->model.n_embd / s->model.n_head);
	if (llama && s->model.rope_scaling.factor > 0 &&
	    s->model.rope_scaling.high_freq_factor <= s->model.rope_scaling.low_freq_factor) {
		char a[32], b[32];
		s_format_real(s->model.rope_scaling.high_freq_factor, a, sizeof(a));
		s_format_real(s->model.rope_scaling.low_freq_factor, b, sizeof(b));
		return s_fail(err, "/model/rope_scaling/high_freq_factor",
			      "model.rope_scaling.high_freq_factor (%s) must be greater than"
			      " model.rope_scaling.low_freq_factor (%s)", a, b);
	}

	/* uint32 and llm.c's version-2 shards hold any vocabulary up to
	 * JOBSPEC_MAX_VOCAB; llmc's version 1 is uint16, checked by the reader
	 * against each token. */
	int vocab_max = JOBSPEC_MAX_VOCAB;
	const char *why = "";
	if (s->data.format == JOBSPEC_FORMAT_TEXT) {
		vocab_max = MAX_TEXT_VOCAB;
		why = "text is read as bytes, one token per byte";
	} else if (s->data.format == JOBSPEC_FORMAT_NANOGPT) {
		vocab_max = MAX_UINT16_VOCAB;
		why = "tokens are stored as uint16; use data.format \"uint32\" for a larger vocabulary";
	}
	if (s->model.vocab_size > vocab_max)
		return s_fail(err, "/model/vocab_size",
			      "model.vocab_size (%d%s) must be at most %d when data.format is \"%s\" (%s)",
			      s->model.vocab_size, s_whose(doc, s, "vocab_size"), vocab_max,
			      jobspec_format_name(s->data.format), why);
	return 0;
}

int jobspec_model_to_json(const jobspec_t *s, json_t *model)
{
	int bad = 0;
	const bool llama = strcmp(s->model.arch, "llama") == 0;
	bad |= json_object_set_new(model, "arch", json_string(s->model.arch));
	if (llama && s->model.preset[0])
		bad |= json_object_set_new(model, "preset", json_string(s->model.preset));
	bad |= json_object_set_new(model, "n_layer", json_integer(s->model.n_layer));
	bad |= json_object_set_new(model, "n_head", json_integer(s->model.n_head));
	bad |= json_object_set_new(model, "n_embd", json_integer(s->model.n_embd));
	bad |= json_object_set_new(model, "vocab_size", json_integer(s->model.vocab_size));
	bad |= json_object_set_new(model, "seq_len", json_integer(s->model.seq_len));
	if (!llama)
		return bad;
	bad |= json_object_set_new(model, "n_kv_head", json_integer(s->model.n_kv_head));
	bad |= json_object_set_new(model, "ffn_dim", json_integer(s->model.ffn_dim));
	bad |= json_object_set_new(model, "rope_theta", json_real(s->model.rope_theta));
	json_t *rs = json_null();
	if (s->model.rope_scaling.factor > 0)
		rs = json_pack("{s:f, s:f, s:f, s:i}", "factor", s->model.rope_scaling.factor,
			       "low_freq_factor", s->model.rope_scaling.low_freq_factor,
			       "high_freq_factor", s->model.rope_scaling.high_freq_factor,
			       "original_max_position", s->model.rope_scaling.original_max_position);
	bad |= json_object_set_new(model, "rope_scaling", rs);
	bad |= json_object_set_new(model, "norm_eps", json_real(s->model.norm_eps));
	bad |= json_object_set_new(model, "tie_embeddings", json_boolean(s->model.tie_embeddings));
	return bad;
}
