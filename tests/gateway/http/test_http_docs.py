"""The curl examples of docs/http.md run against a real gateway: every command exits 0
(the stream ends at curl's --max-time) and answers JSON without a 5xx."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gateway.config import AUTO

from ..amqp_support import ThreadGateway

DOC = Path(__file__).resolve().parents[3] / "docs" / "http.md"


def commands() -> list[str]:
    text = DOC.read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    out = []
    for block in blocks:
        joined = re.sub(r"\\\n\s*", " ", block)
        out += [ln.strip() for ln in joined.splitlines()
                if ln.strip().startswith("curl ")]
    return out


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_examples_of_docs_http_md_run(tmp_path):
    cmds = commands()
    assert len(cmds) >= 10
    gw = ThreadGateway(tmp_path / "data", http_port=AUTO).start()
    try:
        assert gw.gateway is not None
        listener = gw.gateway.listener("http")
        assert listener is not None
        for cmd in cmds:
            # every example of docs/http.md uses 8088 (`lmq serve --http-port 8088`)
            cmd = cmd.replace("127.0.0.1:8088", f"127.0.0.1:{listener.port}")
            cmd = cmd.replace("curl ", "curl --max-time 3 ", 1)
            cmd = cmd.replace("wait_seconds=20", "wait_seconds=1")
            proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True,
                                  timeout=15)
            if " -N " in cmd:  # the event stream: ended by --max-time
                assert proc.returncode == 28, (cmd, proc.stderr)
                assert "event: message" in proc.stdout
                continue
            assert proc.returncode == 0, (cmd, proc.stderr)
            doc = json.loads(proc.stdout)
            assert not (isinstance(doc, dict) and doc.get("status", 0) >= 500), (cmd, doc)
    finally:
        gw.stop()
