"""`permafrost serve` itself: first start, generated credentials, the configuration file."""

import re
import stat

from conftest import Server, client


def test_first_start_generates_private_credentials_and_a_config_that_later_starts_keep(tmp_path):
    data = tmp_path / "data"
    server = Server(data, env_credentials=False)
    (data / "permafrost.toml").unlink()  # a truly fresh data directory: serve writes its own
    server.start()
    try:
        credentials = data / "credentials"
        assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
        text = credentials.read_text()
        key = re.search(r'access_key = "([^"]+)"', text).group(1)
        secret = re.search(r'secret_key = "([^"]+)"', text).group(1)
        config = (data / "permafrost.toml").read_text()
        assert config.startswith("#") and "[store]" in config and "[server]" in config
        log = server.log_tail()
        assert f"http://127.0.0.1:{server.port}" in log and key in log
        s3 = client(server.endpoint, access_key=key, secret_key=secret)
        s3.create_bucket(Bucket="fresh")
        s3.put_object(Bucket="fresh", Key="k", Body=b"v")
        assert server.stop() == 0
        server.start()
        assert credentials.read_text() == text and (data / "permafrost.toml").read_text() == config
        assert s3.get_object(Bucket="fresh", Key="k")["Body"].read() == b"v"
    finally:
        server.kill()
