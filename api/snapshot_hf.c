/*
 * snapshot_hf: a Llama snapshot exported as a Hugging Face model folder.
 *
 * `ringctl export` of a Llama job writes a folder that
 * LlamaForCausalLM.from_pretrained() reads: model.safetensors (the tensor
 * table's HF names and (out, in) shapes, F32, from snap_export_hf: the flat
 * buffer already stores q_proj/k_proj rows in HF's rotate-half order, so no
 * permutation is needed; BF16 with --dtype bf16) and config.json, built here from the manifest's
 * model object (the job spec's model section, every Llama field). GPT-2
 * exports stay one file (snap_export_hf).
 */
#include "snapshot_internal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* An integer field of the manifest's model object, in [1, INT32_MAX]. */
static int model_int(const json_t *model, const char *key, json_int_t *ret, char *err, size_t err_len)
{
	const json_t *v = json_object_get(model, key);
	if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > INT32_MAX)
		return fail(err, err_len, -EINVAL,
		            "the snapshot's model has no valid %s (a positive integer): not a Llama job's"
		            " manifest", key);
	*ret = json_integer_value(v);
	return 0;
}

static int model_real(const json_t *model, const char *key, double *ret, char *err, size_t err_len)
{
	const json_t *v = json_object_get(model, key);
	if (!json_is_number(v) || !(json_number_value(v) > 0))
		return fail(err, err_len, -EINVAL,
		            "the snapshot's model has no valid %s (a positive number): not a Llama job's"
		            " manifest", key);
	*ret = json_number_value(v);
	return 0;
}

bool snap_model_is_llama(const json_t *model)
{
	const char *arch = json_string_value(json_object_get(model, "arch"));
	return arch && strcmp(arch, "llama") == 0;
}

int snap_hf_llama_config(const json_t *model, bool bf16, json_t **ret_config, char *err,
                         size_t err_len)
{
	if (!snap_model_is_llama(model))
		return fail(err, err_len, -EINVAL, "the snapshot's model is not a Llama (model.arch \"llama\")");
	/* set by model_int/model_real before use; initialised for -O3's
	 * maybe-uninitialized, which cannot see that fail() always fails */
	json_int_t L = 0, H = 1, KV = 0, C = 0, F = 0, V = 0, T = 0;
	double theta = 0, eps = 0;
	int rc;
	if ((rc = model_int(model, "n_layer", &L, err, err_len)) < 0 ||
	    (rc = model_int(model, "n_head", &H, err, err_len)) < 0 ||
	    (rc = model_int(model, "n_kv_head", &KV, err, err_len)) < 0 ||
	    (rc = model_int(model, "n_embd", &C, err, err_len)) < 0 ||
	    (rc = model_int(model, "ffn_dim", &F, err, err_len)) < 0 ||
	    (rc = model_int(model, "vocab_size", &V, err, err_len)) < 0 ||
	    (rc = model_int(model, "seq_len", &T, err, err_len)) < 0 ||
	    (rc = model_real(model, "rope_theta", &theta, err, err_len)) < 0 ||
	    (rc = model_real(model, "norm_eps", &eps, err, err_len)) < 0)
		return rc;
	const json_t *tie = json_object_get(model, "tie_embeddings");
	if (!json_is_boolean(tie))
		return fail(err, err_len, -EINVAL, "the snapshot's model has no tie_embeddings (true or false)");
	const json_t *rs = json_object_get(model, "rope_scaling");
	json_t *scaling = json_null();
	if (json_is_object(rs)) {
		double factor = 0, lo = 0, hi = 0;
		json_int_t orig = 0;
		if ((rc = model_real(rs, "factor", &factor, err, err_len)) < 0 ||
		    (rc = model_real(rs, "low_freq_factor", &lo, err, err_len)) < 0 ||
		    (rc = model_real(rs, "high_freq_factor", &hi, err, err_len)) < 0 ||
		    (rc = model_int(rs, "original_max_position", &orig, err, err_len)) < 0)
			return rc;
		/* HF's names: rope_type "llama3" is Llama 3.1's frequency scaling */
		scaling = json_pack("{s:s, s:f, s:f, s:f, s:I}", "rope_type", "llama3", "factor", factor,
		                    "low_freq_factor", lo, "high_freq_factor", hi,
		                    "original_max_position_embeddings", orig);
	}
	json_t *c = json_pack("{s:[s], s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:o*,"
	                      " s:b, s:s, s:s, s:b, s:b, s:f}",
	                      "architectures", "LlamaForCausalLM", "model_type", "llama",
	                      "hidden_size", C, "intermediate_size", F, "num_attention_heads", H,
	                      "num_hidden_layers", L, "num_key_value_heads", KV, "head_dim", C / H,
	                      "vocab_size", V, "max_position_embeddings", T, "rms_norm_eps", eps,
	                      "rope_theta", theta, "rope_scaling", scaling,
	                      "tie_word_embeddings", json_is_true(tie), "torch_dtype", bf16 ? "bfloat16" : "float32",
	                      "hidden_act", "silu", "attention_bias", 0, "mlp_bias", 0,
	                      "initializer_range", 0.02);
	if (!c)
		return fail(err, err_len, -ENOMEM, "out of memory building config.json");
	*ret_config = c;
	return 0;
}

/* Write text to dir/name through a temporary name, fsynced, mode 0600. */
static int write_file_atomic(const char *dir, const char *name, const char *text, char *err,
                             size_t err_len)
{
	char path[4096], tmp[4200];
	if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
		return fail(err, err_len, -ENAMETOOLONG, "path too long: %s/%s", dir, name);
	snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return fail_errno(err, err_len, errno, "cannot create", tmp);
	size_t n = strlen(text), done = 0;
	while (done < n) {
		ssize_t w = write(fd, text + done, n - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? errno : EIO;
			close(fd);
			unlink(tmp);
			return fail_errno(err, err_len, e, "cannot write", tmp);
		}
		done += (size_t)w;
	}
	if (fsync(fd) != 0 || close(fd) != 0) {
		int e = errno;
		unlink(tmp);
		return fail_errno(err, err_len, e, "cannot write", tmp);
	}
	if (rename(tmp, path) != 0) {
		int e = errno;
		unlink(tmp);
		return fail_errno(err, err_len, e, "cannot rename into", path);
	}
	return 0;
}

int snap_export_hf_dir(snap_t *s, const char *out_dir, bool bf16, snap_export_info_t *ret_info,
                       char *err, size_t err_len)
{
	const snap_manifest_t *m = snap_manifest(s);
	json_t *config = NULL;
	int rc = snap_hf_llama_config(m->model, bf16, &config, err, err_len);
	if (rc < 0)
		return rc;
	struct stat st;
	if (mkdir(out_dir, 0700) != 0 && errno != EEXIST) {
		rc = fail_errno(err, err_len, errno, "cannot create the export folder", out_dir);
		goto out;
	}
	if (stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		rc = fail(err, err_len, -ENOTDIR,
		          "%s is not a folder: a Llama export is a folder (model.safetensors and"
		          " config.json); give -o a folder's path", out_dir);
		goto out;
	}
	char path[4096];
	if (snprintf(path, sizeof path, "%s/model.safetensors", out_dir) >= (int)sizeof path) {
		rc = fail(err, err_len, -ENAMETOOLONG, "path too long: %s", out_dir);
		goto out;
	}
	if ((rc = snap_export_hf_dtype(s, path, bf16, ret_info, err, err_len)) < 0)
		goto out;
	char *text = json_dumps(config, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	if (!text) {
		rc = fail(err, err_len, -ENOMEM, "out of memory writing config.json");
		goto out;
	}
	size_t len = strlen(text);
	char *with_nl = realloc(text, len + 2);
	if (!with_nl) {
		free(text);
		rc = fail(err, err_len, -ENOMEM, "out of memory writing config.json");
		goto out;
	}
	memcpy(with_nl + len, "\n", 2);
	rc = write_file_atomic(out_dir, "config.json", with_nl, err, err_len);
	free(with_nl);
	if (rc == 0) { /* the renames are durable once the folder is synced */
		int dfd = open(out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0 || fsync(dfd) != 0)
			rc = fail_errno(err, err_len, errno, "cannot sync", out_dir);
		if (dfd >= 0)
			close(dfd);
	}
out:
	json_decref(config);
	return rc;
}
