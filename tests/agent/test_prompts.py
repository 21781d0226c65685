from nexus.agent.prompts import observation, truncate_middle


def test_truncation_keeps_head_and_tail_and_says_so():
    text = "".join(f"row {i}\n" for i in range(2000))
    cut, was_cut = truncate_middle(text, 600)
    assert was_cut
    assert cut.startswith("row 0\n") and cut.endswith("row 1999\n")
    assert "omitted from the middle" in cut
    assert len(cut) < 800
    same, was_cut = truncate_middle("short", 600)
    assert same == "short" and not was_cut


def test_observation_reports_exit_code_timeout_and_empty_output():
    text, _ = observation("", 137, timed_out=True, truncated=False, limit=100)
    assert text.startswith("Output:\n(no output)\n\n") and text.endswith("[exit code 137 (the command timed out and was killed)]")
