"""The examples of docs/http.md's "The Aliyun MQ HTTP API" (Python, the real SDK) and
"RIP-17" (curl) sections run as written against a gateway, the port aside."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .aliyun_support import aliyun_gateway

DOC = Path(__file__).resolve().parents[3] / "docs" / "http.md"


def _section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def _block(section: str, lang: str) -> str:
    match = re.search(rf"```{lang}\n(.*?)```", section, re.S)
    assert match is not None, f"no {lang} block"
    return match.group(1)


def test_python_example(tmp_path: Path) -> None:
    code = _block(_section("The Aliyun MQ HTTP API"), "python")
    assert "127.0.0.1:8088" in code
    with aliyun_gateway(tmp_path / "data") as gw:
        code = code.replace("http://127.0.0.1:8088", gw.endpoint)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["hello", "order-1", "eu"]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_rip17_curl_example(tmp_path: Path) -> None:
    script = _block(_section("RIP-17"), "sh")
    with aliyun_gateway(tmp_path / "data") as gw:
        script = script.replace("http://127.0.0.1:8088", gw.endpoint)
        done = subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True,
                              timeout=60)
    assert done.returncode == 0, done.stderr
    decoder, out, at = json.JSONDecoder(), [], 0
    while at < len(done.stdout.strip()):
        value, at = decoder.raw_decode(done.stdout, at)
        out.append(value)
    assert out == [{"retCode": 0, "retMsg": "success"}] * 2
