"""media.dtls.certificateFile / privateKeyFile: the server's DTLS identity comes from the
configured PEM files — the fingerprint in its SDP is that certificate's, and media flows over it.
A key that does not match the certificate stops the server at start with a clear error."""
from __future__ import annotations

import datetime
import hashlib
import os
import subprocess

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from conftest import ARTIFACTS, minato_binary
from media import SyntheticVideoTrack, VideoSink
from minato_client import Member, create_room, run_async, unique_name

CERT_DIR = ARTIFACTS / "dtls-cert"


def make_identity(name: str) -> tuple[str, str, str]:
    """A self-signed ECDSA P-256 certificate; returns (cert path, key path, 'AB:CD:…' SHA-256)."""
    CERT_DIR.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30)).sign(key, hashes.SHA256()))
    cert_path, key_path = CERT_DIR / f"{name}.crt", CERT_DIR / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    digest = hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest().upper()
    return str(cert_path), str(key_path), ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


CERT, KEY, FINGERPRINT = make_identity("configured")
MINATO_SERVER_ENV = {"MINATO_MEDIA_DTLS_CERTIFICATE_FILE": CERT, "MINATO_MEDIA_DTLS_PRIVATE_KEY_FILE": KEY}


async def scenario(url: str) -> None:
    room = await create_room(url, unique_name("dtlscert"))
    a = await Member.join(url, room["id"], "A")
    b = await Member.join(url, room["id"], "B")
    sink = None
    try:
        pub = await a.publish(SyntheticVideoTrack())
        answer = a.send_pc.remoteDescription.sdp
        fingerprints = {line.split(" ", 1)[1].strip().upper() for line in answer.splitlines()
                        if line.startswith("a=fingerprint:sha-256")}
        assert fingerprints == {FINGERPRINT}, f"server fingerprint {fingerprints}, configured {FINGERPRINT}"
        sub = await b.subscribe(pub.id)
        assert FINGERPRINT in b.recv_pc.remoteDescription.sdp.upper()
        sink = VideoSink(sub.track, "B-video")
        assert await sink.wait_frames(10, 15), "no video over DTLS with the configured certificate"
    finally:
        if sink:
            sink.stop()
        await a.close()
        await b.close()


def test_configured_certificate_is_used(server):
    run_async(scenario(server.url), timeout=60)


def test_mismatched_key_is_refused_at_start(server):
    _, other_key, _ = make_identity("other")
    env = {**os.environ, "MINATO_MEDIA_DTLS_CERTIFICATE_FILE": CERT, "MINATO_MEDIA_DTLS_PRIVATE_KEY_FILE": other_key}
    proc = subprocess.run([str(minato_binary()), "serve", "--port", "1"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0, proc.stderr
    assert "does not match the certificate" in proc.stderr, proc.stderr
