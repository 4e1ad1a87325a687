/*
 * libFuzzer harness for the wire codec (api/wire.c). The input is cut into
 * frames: byte 0 gives the frame count (0-5), then each frame but the last
 * is a 2-byte little-endian length and that many bytes; the last frame takes
 * the rest. Whatever wire_decode makes of it, it must either refuse it with
 * a message and a code that maps to 400/404/413, or accept it; an accepted
 * payload must encode and decode again to an equal payload of the same type.
 * Anything else aborts.
 */
#include "wire.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t n_frames = data[0] % 6;
	const void *frames[5];
	size_t sizes[5];
	size_t pos = 1;
	for (size_t i = 0; i < n_frames; i++) {
		size_t len;
		if (i + 1 < n_frames) {
			if (pos + 2 > size)
				return 0;
			len = (size_t)data[pos] | (size_t)data[pos + 1] << 8;
			pos += 2;
			if (len > size - pos)
				len = size - pos;
		} else {
			len = size - pos;
		}
		frames[i] = data + pos;
		sizes[i] = len;
		pos += len;
	}
	char err[256] = "";
	wire_type_t type;
	json_t *payload = NULL;
	int rc = wire_decode(n_frames, frames, sizes, &type, &payload, err, sizeof err);
	if (rc != 0) {
		int code = wire_error_code(rc);
		if (payload || err[0] == '\0' || (code != 400 && code != 404 && code != 413))
			abort();
		if (rc != -EPROTO && rc != -ENOENT && rc != -EMSGSIZE && rc != -EINVAL)
			abort();
		return 0;
	}
	char *buf = NULL;
	size_t len = 0;
	if (wire_encode(type, payload, &buf, &len, err, sizeof err) != 0)
		abort();
	const char *name = wire_type_name(type);
	const void *f2[3] = {WIRE_PROTOCOL, name, buf};
	size_t s2[3] = {strlen(WIRE_PROTOCOL), strlen(name), len};
	wire_type_t type2;
	json_t *payload2 = NULL;
	if (wire_decode(3, f2, s2, &type2, &payload2, err, sizeof err) != 0 || type2 != type ||
	    !json_equal(payload, payload2))
		abort();
	json_decref(payload2);
	json_decref(payload);
	free(buf);
	return 0;
}
