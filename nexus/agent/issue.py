"""Turn `--issue FILE|TEXT|GITHUB_ISSUE_URL` into issue text, or one clear sentence saying why not."""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from pathlib import Path

from nexus.errors import NexusError

_GITHUB = re.compile(r"^https?://(www\.)?github\.com/(?P<owner>[^/\s]+)/(?P<repo>[^/\s]+)/issues/(?P<num>\d+)/?(#.*)?$")
_LOOKS_LIKE_FILE = re.compile(r"^[^\s]+\.(md|txt|rst|json)$|^[^\s]*/[^\s]*$", re.IGNORECASE)
API_TIMEOUT_S = 5.0
DEFAULT_API = "https://api.github.com"  # NEXUS_GITHUB_API overrides it (a proxy or mirror of the REST API)


def load_issue(value: str, *, timeout: float = API_TIMEOUT_S) -> tuple[str, str]:
    """Returns (text, source) where source is "file:PATH", "github:URL" or "text"."""
    value = (value or "").strip()
    if not value:
        raise NexusError("the issue is empty; pass the issue text, a file that holds it, or a GitHub issue URL.")
    m = _GITHUB.match(value)
    if m:
        return _check(fetch_github_issue(m["owner"], m["repo"], int(m["num"]), timeout=timeout), value), f"github:{value}"
    if value.startswith(("http://", "https://")):
        raise NexusError(f"{value} is not a GitHub issue URL (https://github.com/OWNER/REPO/issues/N); "
                         "save the issue text to a file and pass --issue FILE.")
    path = Path(value).expanduser()
    if path.exists() or _LOOKS_LIKE_FILE.match(value):
        return _check(read_issue_file(path), str(path)), f"file:{path}"
    return value, "text"


def text_note(value: str, source: str) -> str | None:
    """A note for an --issue that was taken as text but reads like a file name (`m.py`): say which it became."""
    value = (value or "").strip()
    if source == "text" and re.fullmatch(r"[^\s]+\.[A-Za-z0-9]{1,8}", value):
        return f"note: no file {value} exists here, so --issue was taken as the issue text {value!r} itself."
    return None


def _check(text: str, where: str) -> str:
    if not text.strip():
        raise NexusError(f"the issue in {where} is empty; write the task into it or pass the issue text.")
    return text.strip()


def read_issue_file(path: Path) -> str:
    if not path.exists():
        raise NexusError(f"issue file {path} does not exist; pass an existing file or the issue text itself.")
    if path.is_dir():
        raise NexusError(f"issue file {path} is a directory; pass a text file with the issue.")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise NexusError(f"issue file {path} is not UTF-8 text; pass a text file with the issue.") from None
    except OSError as e:
        raise NexusError(f"cannot read issue file {path} ({e.strerror}); check its permissions.") from None


def fetch_github_issue(owner: str, repo: str, number: int, *, timeout: float = API_TIMEOUT_S) -> str:
    api = os.environ.get("NEXUS_GITHUB_API", DEFAULT_API).rstrip("/")
    url = f"{api}/repos/{owner}/{repo}/issues/{number}"
    headers = {"Accept": "application/vnd.github+json", "User-Agent": "nexus-agent"}
    if os.environ.get("GITHUB_TOKEN"):  # unauthenticated clients get 60 requests an hour
        headers["Authorization"] = f"Bearer {os.environ['GITHUB_TOKEN']}"
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            data = json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        raise NexusError(f"GitHub answered {e.code} for issue {owner}/{repo}#{number}; check the URL, "
                         "or save the issue text to a file and pass --issue FILE.") from None
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise NexusError(f"cannot reach the GitHub API for issue {owner}/{repo}#{number} ({reason}); "
                         "save the issue text to a file and pass --issue FILE.") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise NexusError(f"the GitHub API sent an unreadable answer for {owner}/{repo}#{number}; "
                         "save the issue text to a file and pass --issue FILE.") from None
    return f"{data.get('title', '')}\n\n{data.get('body') or ''}"
