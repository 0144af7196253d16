"""The one-line-fix agent's parsing and editing (the program itself; its rollouts: test_line_fix.py)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from legorl.harnesses.line_agent import LINE_REF, answer_line, is_statement, main, numbered, replace_line


@pytest.mark.parametrize(
    ("reply", "line", "valid"),
    [
        ("```python\n    return a + b\n```", "    return a + b", True),
        ("```\nreturn a + b\n```", "return a + b", True),
        ("```python\n3:     return a + b\n```", "    return a + b", True),  # copied line number dropped
        ("return a * b", "return a * b", False),  # no fence: used, but not the asked-for format
        ("```python\ndef pick(a, b):\n    return a\n```", "def pick(a, b):", False),  # the whole function
        ("```python\nreturn (a +\n```", "return (a +", False),
        ("", None, False),
        ("```python\n\n```", None, False),
    ],
)
def test_answer_line(reply, line, valid):
    assert answer_line(reply) == (line, valid)


def test_is_statement():
    assert is_statement("return xs[-1]") and is_statement("x = 1")
    assert not is_statement("def f():") and not is_statement("return a; return b") and not is_statement("if x:")


def test_replace_line_keeps_indentation(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('def f(a):\n    """Doc."""\n    return a\n')
    assert replace_line(f, 3, "return a + 1") is None
    assert f.read_text() == 'def f(a):\n    """Doc."""\n    return a + 1\n'
    assert "not in m.py" in replace_line(f, 9, "x")
    assert numbered("a\nb\n") == "1: a\n2: b"


def test_issue_must_name_a_line_inside_the_repository(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    (tmp_path / "repo").mkdir()
    (tmp_path / "outside.py").write_text("x = 1\n")
    for text in ("no line named here", "The bug is on line 1 of `../outside.py`."):
        issue = tmp_path / "issue"
        issue.write_text(text)
        code = main(["--base-url=http://127.0.0.1:9/v1", f"--issue-file={issue}", f"--root={tmp_path / 'repo'}"])
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert code == 1 and summary["finish"] == "no_line" and summary["turns"] == 0
    assert LINE_REF.search("on line 12 of `lib/x.py`.").groups() == ("12", "lib/x.py")


class _FlakyEndpoint(BaseHTTPRequestHandler):
    """Fault injection: answers each request with the next (status, body) of ``replies``."""

    replies: list[tuple[int, dict]] = []
    seen: list[dict] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "auth": self.headers["Authorization"], "body": body})
        status, reply = type(self).replies.pop(0)
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def _serve(replies: list[tuple[int, dict]]):
    _FlakyEndpoint.replies, _FlakyEndpoint.seen = list(replies), []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FlakyEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _repo_with_bug(tmp_path):
    (tmp_path / "repo" / "lib").mkdir(parents=True)
    (tmp_path / "repo" / "lib" / "funcs.py").write_text(
        'def pick(a, b):\n    """Return a times b."""\n    return a + b\n'
    )
    (tmp_path / "issue").write_text("`pick(2, 3)` returns 5, expected 6. The bug is on line 3 of `lib/funcs.py`.")
    return tmp_path / "repo" / "lib" / "funcs.py"


def _run(tmp_path, server, capsys):
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    code = main([f"--base-url={url}", f"--issue-file={tmp_path / 'issue'}", f"--root={tmp_path / 'repo'}"])
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_server_error_is_retried_then_answered(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setattr("legorl.harnesses.line_agent.time.sleep", lambda s: None)
    funcs = _repo_with_bug(tmp_path)
    ok = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "```python\nreturn a * b\n```"}}]}
    server = _serve([(503, {"error": {"message": "busy"}}), (200, ok)])
    try:
        code, summary = _run(tmp_path, server, capsys)
    finally:
        server.shutdown()
    assert code == 0 and summary["finish"] == "answered" and summary["valid_format"]
    assert funcs.read_text().splitlines()[2] == "    return a * b"
    assert len(_FlakyEndpoint.seen) == 2
    first = _FlakyEndpoint.seen[0]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer sk-test"
    assert first["body"]["messages"][-1]["role"] == "user" and first["body"]["model"] == "policy"


def test_client_error_is_final_and_leaves_the_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    funcs = _repo_with_bug(tmp_path)
    before = funcs.read_text()
    server = _serve([(401, {"error": {"message": "bad session token"}})])
    try:
        code, summary = _run(tmp_path, server, capsys)
    finally:
        server.shutdown()
    assert (
        code == 2 and summary["finish"].startswith("api_error: HTTP 401") and "bad session token" in summary["finish"]
    )
    assert len(_FlakyEndpoint.seen) == 1 and funcs.read_text() == before
