"""`--issue https://github.com/OWNER/REPO/issues/N`: fetched from the GitHub REST API. The API here is a real HTTP
server on loopback (NEXUS_GITHUB_API points at it): the real client code, the real socket, GitHub's JSON shape."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from nexus.agent.issue import load_issue
from nexus.errors import NexusError

from .conftest import SOLVING_SCRIPT
from tests.conftest import LOCAL

ISSUES = {
    "/repos/octo/calc/issues/7": {"number": 7, "title": "add() subtracts",
                                  "body": "calc.add(2, 3) returns -1.\r\nExpected 5."},
    "/repos/octo/calc/issues/8": {"number": 8, "title": "", "body": None},
}


class FakeGitHub(BaseHTTPRequestHandler):
    seen: list[dict] = []

    def do_GET(self):  # noqa: N802 (the http.server API)
        FakeGitHub.seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
        if self.path == "/repos/octo/calc/issues/9":
            body, code = b"<html>not json</html>", 200
        elif self.path in ISSUES:
            body, code = json.dumps(ISSUES[self.path]).encode(), 200
        else:
            body, code = json.dumps({"message": "Not Found"}).encode(), 404
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # keep the test output clean
        pass


@pytest.fixture
def github(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeGitHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeGitHub.seen = []
    monkeypatch.setenv("NEXUS_GITHUB_API", f"http://127.0.0.1:{server.server_address[1]}/")
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    for var in ("no_proxy", "NO_PROXY"):  # a machine with http_proxy set must still reach loopback directly
        monkeypatch.setenv(var, "127.0.0.1,localhost")
    yield FakeGitHub.seen
    server.shutdown()
    server.server_close()


def test_issue_url_is_fetched_as_title_and_body(github, monkeypatch):
    url = "https://github.com/octo/calc/issues/7"
    text, source = load_issue(url)
    assert text == "add() subtracts\n\ncalc.add(2, 3) returns -1.\r\nExpected 5."
    assert source == f"github:{url}"
    assert github[-1]["path"] == "/repos/octo/calc/issues/7" and "authorization" not in github[-1]
    assert github[-1]["accept"] == "application/vnd.github+json"
    monkeypatch.setenv("GITHUB_TOKEN", "tok123")
    load_issue(url + "#issuecomment-1")  # an anchor on the URL is fine
    assert github[-1]["authorization"] == "Bearer tok123"


@pytest.mark.parametrize("number, message", [
    (1, "GitHub answered 404 for issue octo/calc#1; check the URL"),
    (8, "the issue in https://github.com/octo/calc/issues/8 is empty"),
    (9, "the GitHub API sent an unreadable answer for octo/calc#9"),
])
def test_api_answers_that_hold_no_issue_are_one_sentence(github, number, message):
    with pytest.raises(NexusError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        load_issue(f"https://github.com/octo/calc/issues/{number}")
    assert "\n" not in str(err.value)


def test_solve_takes_the_fetched_issue_into_the_task(github, cli, calc_repo, write_script, tmp_path):
    out = tmp_path / "out"
    r = cli("solve", "--repo", calc_repo.path, "--issue", "https://github.com/octo/calc/issues/7",
            "--model", f"scripted:{write_script(SOLVING_SCRIPT)}", "--sandbox", LOCAL, "-o", out)
    assert r.returncode == 0, r.stdout + r.stderr
    trajectory = json.loads((out / "trajectory.json").read_text())
    task = trajectory["messages"][1]["content"]
    assert "add() subtracts" in task and "Expected 5." in task
