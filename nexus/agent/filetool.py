#!/usr/bin/env python3
"""nexus-file: the agent's small file tool, copied into every sandbox (standard library only, Python 3.8+).

  nexus-file view PATH [START END]      lines with numbers (a directory: its files)
  nexus-file create PATH                write stdin to PATH (parents created)
  nexus-file str_replace PATH           stdin = old text, a line =======, new text (or --old X --new Y);
                                        fails loudly unless the old text occurs exactly once
  nexus-file insert PATH LINE           insert stdin after line LINE (0 = top)
  nexus-file undo PATH                  restore PATH as it was before the last nexus-file edit

Edits keep a backup stack under $NEXUS_FILE_HISTORY (default /tmp/nexus-file-history), outside the repository,
so `undo` works and the patch stays clean.
"""

import hashlib
import os
import sys

SEPARATOR = "======="
VIEW_MAX_LINES = 400
HISTORY = os.environ.get("NEXUS_FILE_HISTORY", "/tmp/nexus-file-history")


def fail(message):
    sys.stderr.write("nexus-file: " + message + "\n")
    sys.exit(1)


def read_text(path):
    if not os.path.exists(path):
        fail("%s does not exist" % path)
    if os.path.isdir(path):
        fail("%s is a directory" % path)
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()
    except UnicodeDecodeError:
        fail("%s is not a UTF-8 text file" % path)


def stdin_text():
    if sys.stdin.isatty():
        fail("this command reads the text from stdin: use a heredoc, e.g. <<'EOF' ... EOF")
    return sys.stdin.read()


def _stack_dir(path):
    key = hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:16]
    return os.path.join(HISTORY, key)


def backup(path):
    """Push the current content (or 'did not exist') so undo can restore it."""
    d = _stack_dir(path)
    os.makedirs(d, exist_ok=True)
    n = len([x for x in os.listdir(d) if x.endswith(".bak") or x.endswith(".absent")])
    if os.path.exists(path):
        with open(path, "rb") as src, open(os.path.join(d, "%06d.bak" % n), "wb") as dst:
            dst.write(src.read())
    else:
        open(os.path.join(d, "%06d.absent" % n), "w").close()


def write_text(path, text):
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = path + ".nexus-tmp"
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    if os.path.exists(path):
        os.chmod(tmp, os.stat(path).st_mode)
    os.replace(tmp, path)


def show(text, start=1, end=None):
    lines = text.splitlines()
    if not lines:
        print("(empty file)")
        return
    end = len(lines) if end is None else min(end, len(lines))
    start = max(1, start)
    shown = lines[start - 1 : end]
    clipped = len(shown) > VIEW_MAX_LINES
    for i, line in enumerate(shown[:VIEW_MAX_LINES], start):
        print("%6d\t%s" % (i, line))
    if clipped:
        print("[... %d more lines; pass START END to see them ...]" % (len(shown) - VIEW_MAX_LINES))


def cmd_view(args):
    if not args or len(args) not in (1, 3):
        fail("usage: nexus-file view PATH [START END]")
    path = args[0]
    if os.path.isdir(path):
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            depth = os.path.relpath(root, path).count(os.sep) + (root != path)
            if depth > 2:
                dirs[:] = []
                continue
            for name in sorted(files):
                print(os.path.relpath(os.path.join(root, name), path))
        return
    text = read_text(path)
    if len(args) == 3:
        try:
            start, end = int(args[1]), int(args[2])
        except ValueError:
            fail("START and END must be line numbers")
        if start < 1 or end < start:
            fail("need 1 <= START <= END, got %s %s" % (args[1], args[2]))
        show(text, start, end)
    else:
        show(text)


def cmd_create(args):
    if len(args) != 1:
        fail("usage: nexus-file create PATH <<'EOF' ... EOF")
    path = args[0]
    if os.path.isdir(path):
        fail("%s is a directory" % path)
    text = stdin_text()
    backup(path)
    write_text(path, text)
    print("created %s (%d lines)" % (path, len(text.splitlines())))


def _old_new(args):
    if "--old" in args or "--new" in args:
        try:
            old = args[args.index("--old") + 1]
            new = args[args.index("--new") + 1]
        except (ValueError, IndexError):
            fail("usage: nexus-file str_replace PATH --old TEXT --new TEXT")
        return old, new
    text = stdin_text()
    lines = text.split("\n")
    if SEPARATOR not in [line.rstrip() for line in lines]:
        fail("stdin must be the old text, a line %s, then the new text" % SEPARATOR)
    i = [line.rstrip() for line in lines].index(SEPARATOR)
    old = "\n".join(lines[:i])
    new = "\n".join(lines[i + 1 :])
    if new.endswith("\n"):
        new = new[:-1]  # the heredoc's final newline, not part of the replacement
    return old, new


def cmd_str_replace(args):
    if not args:
        fail("usage: nexus-file str_replace PATH <<'EOF' old ======= new EOF")
    path = args[0]
    text = read_text(path)
    old, new = _old_new(args[1:])
    if not old:
        fail("the old text is empty; give the exact text to replace")
    count = text.count(old)
    if count == 0:
        fail("the old text was not found in %s; view the file and copy the text exactly (spaces too)" % path)
    if count > 1:
        starts, at = [], -1
        for _ in range(count):
            at = text.index(old, at + 1)
            starts.append(str(text.count("\n", 0, at) + 1))
        fail(
            "the old text occurs %d times in %s (lines %s); include more lines to make it unique"
            % (count, path, ", ".join(starts))
        )
    at = text.index(old)
    backup(path)
    write_text(path, text.replace(old, new, 1))
    first = text.count("\n", 0, at) + 1
    print("replaced 1 occurrence in %s; the new lines:" % path)
    show(read_text(path), max(1, first - 2), first + new.count("\n") + 2)


def cmd_insert(args):
    if len(args) != 2:
        fail("usage: nexus-file insert PATH LINE <<'EOF' ... EOF")
    path = args[0]
    try:
        line = int(args[1])
    except ValueError:
        fail("LINE must be a line number")
    text = read_text(path)
    lines = text.splitlines(keepends=True)
    if line < 0 or line > len(lines):
        fail("LINE must be between 0 and %d (the file has %d lines)" % (len(lines), len(lines)))
    new = stdin_text()
    if new and not new.endswith("\n"):
        new += "\n"
    if line and lines and not lines[line - 1].endswith("\n"):
        lines[line - 1] += "\n"
    backup(path)
    write_text(path, "".join(lines[:line]) + new + "".join(lines[line:]))
    print("inserted %d lines after line %d of %s" % (len(new.splitlines()), line, path))
    show(read_text(path), max(1, line - 1), line + len(new.splitlines()) + 1)


def cmd_undo(args):
    if len(args) != 1:
        fail("usage: nexus-file undo PATH")
    path = args[0]
    d = _stack_dir(path)
    entries = sorted(os.listdir(d)) if os.path.isdir(d) else []
    if not entries:
        fail("no nexus-file edit of %s to undo" % path)
    last = os.path.join(d, entries[-1])
    if last.endswith(".absent"):
        if os.path.exists(path):
            os.remove(path)
        print("undone: %s removed (it did not exist before)" % path)
    else:
        with open(last, "rb") as f:
            data = f.read()
        tmp = path + ".nexus-tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        print("undone: %s restored" % path)
    os.remove(last)


COMMANDS = {"view": cmd_view, "create": cmd_create, "str_replace": cmd_str_replace, "insert": cmd_insert, "undo": cmd_undo}


def main(argv):
    if not argv or argv[0] not in COMMANDS:
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        fail("unknown command; use one of: " + ", ".join(COMMANDS))
    COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
