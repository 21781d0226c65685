from nexus.agent.actions import parse_action


def test_one_bash_block_is_a_command():
    a = parse_action("I will list files.\n\n```bash\nls -la\n```\n")
    assert a.kind == "command" and a.command == "ls -la"


def test_multiline_command_and_bare_fence_and_prompt_char():
    a = parse_action("```\ncd src\ngrep -n foo *.py\n```")
    assert a.kind == "command" and a.command == "cd src\ngrep -n foo *.py"
    assert parse_action("```sh\n$ pytest -x\n```").command == "pytest -x"


def test_submit_alone_ends_the_task_but_not_inside_a_larger_command():
    assert parse_action("Done.\n```bash\nsubmit\n```").kind == "submit"
    a = parse_action("```bash\necho submit\n```")
    assert a.kind == "command" and a.command == "echo submit"


def test_format_errors_name_the_problem():
    assert "no ```bash block" in parse_action("I think we should run the tests.").error
    assert "2 bash blocks" in parse_action("```bash\nls\n```\nthen\n```bash\npwd\n```").error
    assert "not a closed" in parse_action("```bash\nls -la").error
    assert "empty" in parse_action("```bash\n\n```").error


def test_python_block_is_not_a_bash_block():
    a = parse_action("```python\nprint(1)\n```")
    assert a.kind == "format_error"


def test_a_block_of_only_comments_is_a_format_error():
    assert "only comments" in parse_action("```bash\n# list the files\n```").error
    assert parse_action("```bash\n# list the files\nls\n```").command == "# list the files\nls"
