"""Each sandbox has its own copy at the base commit; diff() is exactly the changes made, new files included."""

from __future__ import annotations

import pytest

from nexus.sandbox import SandboxFileNotFound

from .conftest import KINDS, git


@pytest.mark.parametrize("kind", KINDS)
def test_two_sandboxes_on_one_repo_are_independent(kind, repo, make_sandbox):
    with make_sandbox(kind, repo) as a, make_sandbox(kind, repo) as b:
        a.execute("echo from-a > a-only.txt && echo changed-by-a > README", timeout=10)
        seen_by_b = b.execute("ls; cat README", timeout=10)
        assert "a-only.txt" not in seen_by_b.output
        assert "second" in seen_by_b.output and "changed-by-a" not in seen_by_b.output
        assert b.diff() == ""
        assert "a-only.txt" in a.diff()
    # The host checkout is untouched.
    assert (repo / "README").read_text() == "second\n"
    assert not (repo / "a-only.txt").exists()
    assert git(repo, "status", "--porcelain") == ""


@pytest.mark.parametrize("kind", KINDS)
def test_diff_is_exactly_the_changes_and_applies_cleanly(kind, repo, make_sandbox, tmp_path):
    with make_sandbox(kind, repo) as sb:
        assert sb.diff() == ""
        sb.execute("printf 'print(\"bye\")\\n' > hello.py && rm gone.txt && mkdir -p pkg && echo 'x = 1' > pkg/new.py"
                   " && echo noise > build.log", timeout=10)
        sb.write_file("notes/todo.md", "- [ ] ship\n")
        patch = sb.diff()
        again = sb.diff()  # diff() must not change the state it reports on
        staged = sb.execute("git status --porcelain", timeout=10).output
    assert patch == again
    files = sorted(line.split(" b/")[-1] for line in patch.splitlines() if line.startswith("diff --git"))
    assert files == ["gone.txt", "hello.py", "notes/todo.md", "pkg/new.py"]  # build.log is git-ignored
    assert "deleted file mode" in patch and "new file mode" in patch
    assert "+print(\"bye\")" in patch and "-print('hello')" in patch
    assert "??" in staged  # the user's index was not touched: new files are still untracked
    # The patch applies to a fresh checkout of the base commit and reproduces the sandbox's tree.
    check = tmp_path / "check"
    git(tmp_path, "clone", "-q", str(repo), str(check))
    (tmp_path / "p.diff").write_text(patch)
    git(check, "apply", str(tmp_path / "p.diff"))
    assert (check / "hello.py").read_text() == 'print("bye")\n'
    assert (check / "pkg" / "new.py").read_text() == "x = 1\n"
    assert not (check / "gone.txt").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_base_commit_is_checked_out_and_diffed_against(kind, repo, make_sandbox):
    first = git(repo, "rev-parse", "first")
    with make_sandbox(kind, repo, base_commit="first") as sb:
        head = sb.execute("git rev-parse HEAD; cat README; ls", timeout=10).output.split()
        assert head[0] == first and head[1] == "first" and "gone.txt" not in head
        # Committing inside the sandbox does not hide changes: the diff is against the base commit.
        sb.execute("echo more >> README && git add README && git commit -qm inside", timeout=10)
        patch = sb.diff()
    assert "+more" in patch and "README" in patch


@pytest.mark.parametrize("kind", KINDS)
def test_files_roundtrip_and_copy_in(kind, repo, make_sandbox, tmp_path):
    host_dir = tmp_path / "fixtures"
    (host_dir / "sub").mkdir(parents=True)
    (host_dir / "sub" / "data.txt").write_text("payload\n")
    with make_sandbox(kind, repo) as sb:
        sb.write_file("deep/dir/f.txt", "héllo\n")
        assert sb.read_file("deep/dir/f.txt") == "héllo\n"
        assert sb.read_file("hello.py") == "print('hello')\n"
        sb.copy_in(host_dir)
        sb.copy_in(host_dir / "sub" / "data.txt", "renamed.txt")
        listing = sb.execute("cat fixtures/sub/data.txt renamed.txt; echo more >> deep/dir/f.txt && echo w-ok",
                             timeout=10)
        with pytest.raises(SandboxFileNotFound):
            sb.read_file("no/such/file")
    assert listing.output.split() == ["payload", "payload", "w-ok"]  # copied files are writable by the command


@pytest.mark.parametrize("kind", KINDS)
def test_cwd_and_env(kind, repo, make_sandbox):
    with make_sandbox(kind, repo) as sb:
        sb.execute("mkdir -p sub", timeout=10)
        res = sb.execute("pwd; echo $GREETING", timeout=10, cwd="sub", env={"GREETING": "hi"})
        assert res.output.split() == [f"{sb.workdir}/sub", "hi"]
        assert sb.execute("pwd", timeout=10).output.strip() == sb.workdir


def test_local_file_api_refuses_paths_outside_the_sandbox(repo, make_sandbox, tmp_path):
    from nexus.sandbox import SandboxError

    (tmp_path / "host.txt").write_text("host\n")
    with make_sandbox("local", repo) as sb:
        sb.execute(f"ln -s {tmp_path}/host.txt link", timeout=10)
        for bad in ("../../outside.txt", "link", str(tmp_path / "host.txt")):
            with pytest.raises(SandboxError, match="outside the sandbox"):
                sb.write_file(bad, "x")
        with pytest.raises(SandboxError, match="outside the sandbox"):
            sb.read_file("link")
    assert (tmp_path / "host.txt").read_text() == "host\n"


def test_local_environment_is_scrubbed(repo, make_sandbox, monkeypatch):
    monkeypatch.setenv("NEXUS_TEST_SECRET_TOKEN", "hunter2")
    with make_sandbox("local", repo) as sb:
        env = sb.execute("env; tty || true; cat; echo stdin-closed", timeout=10).output
    assert "hunter2" not in env and "NEXUS_TEST_SECRET_TOKEN" not in env
    assert "stdin-closed" in env  # `cat` got EOF at once instead of hanging


@pytest.mark.parametrize("kind", KINDS)
def test_explicit_env_wins_over_the_login_profile(kind, repo, make_sandbox):
    from nexus.sandbox import SandboxError

    with make_sandbox(kind, repo) as sb:
        res = sb.execute("echo $PATH; echo \"$Q\"", timeout=10, env={"PATH": "/custom/bin", "Q": "a 'b' $c"})
        assert res.output.splitlines() == ["/custom/bin", "a 'b' $c"]  # a PATH without /usr/bin still runs
        with pytest.raises(SandboxError, match="not valid"):
            sb.execute("true", timeout=5, env={"BAD-NAME": "x"})
