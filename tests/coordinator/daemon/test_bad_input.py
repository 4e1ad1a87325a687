"""ringmasterd bad input: every malformed request gets the right status and a
problem+json detail (with the pointer of the field at fault); the daemon keeps
serving and stores none of them."""
import json
import socket
import threading

from rmtest import Daemon, check, problem_of, run

GOOD = {"name": "ok", "data": {"train": "t.bin"}}


def with_(path, value):
    """GOOD with the field at JSON pointer `path` set to value."""
    doc = json.loads(json.dumps(GOOD))
    parts = path.strip("/").split("/")
    cur = doc
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value
    return json.dumps(doc).encode()


def raw_request(port, head, body_chunks=(), read_first=False):
    """Send raw bytes; returns (status, headers, body) of the answer."""
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    try:
        s.sendall(head)
        sender = None
        if not read_first:
            def send_body():
                for chunk in body_chunks:
                    try:
                        s.sendall(chunk)
                    except OSError:
                        break
            # the server may answer (413) and close before the body is sent
            sender = threading.Thread(target=send_body, daemon=True)
            sender.start()
        data = b""
        while b"\r\n\r\n" not in data:
            got = s.recv(65536)
            if not got:
                break
            data += got
        head_text, _, rest = data.partition(b"\r\n\r\n")
        lines = head_text.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        while len(rest) < n:
            got = s.recv(65536)
            if not got:
                break
            rest += got
        return status, headers, rest[:n]
    finally:
        if sender:
            sender.join(20)
        s.close()


def main(binary, workdir, daemons):
    d = Daemon(binary, workdir)
    daemons.append(d)
    d.start()
    port = d.port
    ct = {"Content-Type": "application/json"}

    cases = [
        # (label, body bytes, headers, status, pointer or None, words expected in detail)
        ("empty body", b"", ct, 400, "", "empty"),
        ("malformed", b"{\"name\": ", ct, 400, "", None),
        ("truncated", json.dumps(GOOD).encode()[:-3], ct, 400, "", None),
        ("not an object", b"[1,2,3]", ct, 400, "", None),
        ("bare string", b"\"hello\"", ct, 400, "", None),
        ("trailing garbage", json.dumps(GOOD).encode() + b" xyz", ct, 400, "", None),
        ("invalid utf-8", b"{\"name\": \"\xff\xfe\", \"data\": {\"train\": \"t\"}}", ct, 400, "", "UTF-8"),
        ("overlong utf-8", b"{\"name\": \"\xc0\xaf\", \"data\": {\"train\": \"t\"}}", ct, 400, "", "UTF-8"),
        ("missing data", b"{\"name\": \"x\"}", ct, 400, None, "data"),
        ("missing train", with_("/data", {}), ct, 400, "/data/train", None),
        ("unknown field", with_("/colour", "red"), ct, 400, "/colour", None),
        ("unknown nested", with_("/model/n_layers", 3), ct, 400, "/model/n_layers", None),
        ("wrong type n_head", with_("/model/n_head", "six"), ct, 400, "/model/n_head", None),
        ("wrong type name", with_("/name", 12), ct, 400, "/name", None),
        ("float steps", with_("/train/steps", 1.5), ct, 400, "/train/steps", None),
        ("zero n_layer", with_("/model/n_layer", 0), ct, 400, "/model/n_layer", None),
        ("negative world", with_("/parallel/world_size", -4), ct, 400, "/parallel/world_size", None),
        ("huge world", with_("/parallel/world_size", 10 ** 30), ct, 400, None, None),
        ("huge steps", with_("/train/steps", 2 ** 70), ct, 400, None, None),
        ("big world", with_("/parallel/world_size", 10 ** 9), ct, 400, "/parallel/world_size", None),
        ("bad enum", with_("/parallel/device", "tpu"), ct, 400, "/parallel/device", None),
        ("heads", with_("/model/n_head", 7), ct, 400, None, None),
        ("empty name", with_("/name", ""), ct, 400, "/name", None),
        ("long name", with_("/name", "x" * 10000), ct, 400, "/name", None),
        ("priority", with_("/priority", 100000), ct, 400, "/priority", None),
        ("deep nesting", b"[" * 100000, ct, 400, "", None),
        ("deep object", b"{\"a\":" * 50000, ct, 400, "", None),
        ("nul byte", b"{\"name\": \"a\\u0000b\", \"data\": {\"train\": \"t\"}}", ct, 400, None, None),
        ("wrong content type", json.dumps(GOOD).encode(), {"Content-Type": "text/plain"}, 415, None, "application/json"),
        ("no content type", json.dumps(GOOD).encode(), {}, 415, None, "application/json"),
        ("json-ish type", json.dumps(GOOD).encode(), {"Content-Type": "application/jsonx"}, 415, None, None),
        ("form", b"name=x", {"Content-Type": "application/x-www-form-urlencoded"}, 415, None, None),
    ]
    for label, body, headers, status, pointer, words in cases:
        st, h, raw = d.request("POST", "/v1/jobs", body, headers)
        check(st == status, "%s: expected %s, got %s: %r" % (label, status, st, raw[:300]))
        p = problem_of(h, raw, status)
        if pointer is not None:
            check(p.get("pointer") == pointer, "%s: pointer %r, expected %r (%r)" % (label, p.get("pointer"), pointer, p))
        if words:
            check(words.lower() in p["detail"].lower(), "%s: detail %r lacks %r" % (label, p["detail"], words))
        if pointer and pointer != "":
            field = pointer.rsplit("/", 1)[-1]
            check(field in p["detail"], "%s: detail %r does not name %s" % (label, p["detail"], field))

    auth = b"Authorization: Bearer %s\r\n" % d.token.encode()
    # a 2 MiB body sent whole: 413 (the server answers without reading it all)
    body = b"{\"name\": \"" + b"a" * (2 << 20) + b"\"}"
    st, h, raw = raw_request(port, b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + auth +
                             b"Content-Length: %d\r\n\r\n" % len(body), [body])
    check(st == 413, "2 MiB body: %s" % st)
    check("limit" in problem_of(h, raw, 413)["detail"], "413 detail")

    # 10 MiB body announced by Content-Length: refused before it is sent
    head = (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + auth +
            b"Content-Length: %d\r\n\r\n" % (10 << 20))
    st, h, raw = raw_request(port, head, read_first=True)
    check(st == 413, "10 MiB announced: %s" % st)
    problem_of(h, raw, 413)
    head_expect = head.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")
    st, h, raw = raw_request(port, head_expect, read_first=True)
    check(st == 413, "10 MiB with Expect: %s" % st)
    # 10 MiB chunked (no Content-Length): counted while streaming
    chunk = b"a" * (1 << 20)
    chunks = [b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(10)] + [b"0\r\n\r\n"]
    head_chunked = (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + auth +
                    b"Transfer-Encoding: chunked\r\n\r\n")
    st, h, raw = raw_request(port, head_chunked, chunks)
    check(st == 413, "10 MiB chunked: %s" % st)
    problem_of(h, raw, 413)

    # SQL metacharacters and long strings that ARE valid are stored exactly
    tricky = ["'; DROP TABLE jobs; --", "Robert\"); DELETE FROM events;--", "%_\\x00\\", "\u00e9\u4e2d\U0001F600",
              "y" * 256, "a\nb\tc"]
    made = []
    for name in tricky:
        job = d.submit({"name": name, "data": {"train": "'; DROP TABLE x;--" + "p" * 4000}})
        check(job["name"] == name, "name %r stored as %r" % (name, job["name"]))
        made.append(job["id"])
    st, h, raw = d.request("GET", "/v1/jobs/'%20OR%201=1--")
    check(st == 404, "injection in id: %s" % st)
    st, h, raw = d.request("GET", "/v1/jobs?state=queued'--")
    check(st == 400, "injection in state: %s" % st)

    # cancel with a body is fine; ids of the wrong shape are 404
    st, h, raw = d.request("POST", "/v1/jobs/%s/cancel" % made[0], b"ignored", {"Content-Type": "text/plain"})
    check(st == 200, "cancel with body: %s" % st)

    # garbage on the workers' ZeroMQ port (not even a ZMTP greeting) is dropped
    for junk in (b"\x00" * 64, b"GET / HTTP/1.1\r\n\r\n", bytes(range(256)) * 40,
                 b"\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f\x03\x00NULL" + b"\x00" * 100):
        z = socket.create_connection(("127.0.0.1", d.broker_port), timeout=5)
        try:
            z.sendall(junk)
            z.settimeout(0.2)
            try:
                z.recv(4096)
            except OSError:
                pass
        finally:
            z.close()

    # still serving; only the valid jobs are stored
    d.json("GET", "/readyz", expect=200)
    _, _, page = d.json("GET", "/v1/jobs?limit=1000", expect=200)
    check(sorted(j["id"] for j in page["jobs"]) == sorted(made),
          "stored %d jobs, expected %d" % (len(page["jobs"]), len(made)))
    rc = d.stop()
    check(rc == 0, "exit status %s" % rc)


if __name__ == "__main__":
    run(main)
