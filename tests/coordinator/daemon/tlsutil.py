"""TLS helpers for the transport tests: a self-signed certificate made with
openssl in a temporary folder, and a Daemon (rmtest.py) that serves HTTPS and
talks to itself with Python's ssl module. Standard library only."""
import http.client
import os
import shutil
import ssl
import subprocess
import sys

import rmtest


def need_openssl():
    if not shutil.which("openssl"):
        print("SKIP: openssl is not installed (scripts/deps installs it)")
        sys.exit(77)


def make_cert(folder, name="server", cn="localhost"):
    """A self-signed certificate for localhost and 127.0.0.1: (cert, key)."""
    cert = os.path.join(folder, name + ".crt")
    key = os.path.join(folder, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=" + cn,
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.chmod(key, 0o600)
    return cert, key


def client_context(cafile):
    return ssl.create_default_context(cafile=cafile)


class TlsDaemon(rmtest.Daemon):
    """ringmasterd with --tls-cert/--tls-key; request() speaks HTTPS."""

    def __init__(self, binary, workdir, cert, key, extra_args=(), **kw):
        super().__init__(binary, workdir, extra_args=["--tls-cert", cert, "--tls-key", key] + list(extra_args), **kw)
        self.cafile = cert
        self.ctx = client_context(cert)

    def conn(self, timeout=30):
        return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout, context=self.ctx)

    def url(self):
        return "https://127.0.0.1:%d" % self.port
