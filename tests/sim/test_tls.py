"""The sandbox's certificates pass strict X.509 verification, as Python 3.13's default context and
current OpenSSL clients apply it (``VERIFY_X509_STRICT``): a CA without key usage or key
identifiers is refused there, and every client of the sandbox would fail its handshake."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from bot.sim.tls import make_certificates, server_context


def _handshake(ca: Path, cert: Path, key: Path) -> str:
    """Serve one TLS handshake on a loopback socket; the client's verdict, as a strict client
    reaches it (the negotiated version, or the error)."""
    server = server_context(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with server.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError):
            pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    client = ssl.create_default_context(cafile=str(ca))
    client.verify_flags |= ssl.VERIFY_X509_STRICT
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                client.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            version = str(tls.version())
            tls.sendall(b"x")
            return version
    except ssl.SSLCertVerificationError as e:
        return f"refused: {e.verify_message}"
    finally:
        t.join(timeout=10)
        listener.close()


def test_a_strict_client_accepts_the_sandbox_s_api_server_certificate(tmp_path: Path) -> None:
    ca, cert, key = make_certificates(tmp_path)
    assert _handshake(ca, cert, key).startswith("TLSv1.")


def test_the_certificates_carry_what_a_cluster_ca_and_serving_certificate_carry(
        tmp_path: Path) -> None:
    ca_path, cert_path, _ = make_certificates(tmp_path)
    ca = x509.load_pem_x509_certificate(ca_path.read_bytes())
    leaf = x509.load_pem_x509_certificate(cert_path.read_bytes())
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.key_cert_sign and usage.value.crl_sign
    ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ski.digest
    assert leaf.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature
    assert ExtendedKeyUsageOID.SERVER_AUTH in leaf.extensions.get_extension_for_class(
        x509.ExtendedKeyUsage).value
