"""Cross-check of three accounts of one test run: swebench's log parser, pytest's junit XML report and the exit
code docker reported for the test command. The code under test can print anything into the log; forging all
three consistently needs code that rewrites pytest's reporting from inside its process, which is what
`tamper.scan` looks for. Any disagreement on a graded test makes the instance an error, never resolved.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from swebench.harness.grading import test_maintained, test_passed

MAX_BYTES = 16 << 20
TAMPERED = "the test report was tampered with or is inconsistent"


def mangle(test_id: str) -> tuple[str, str]:
    """A pytest node id as junit names it (classname, name), as `_pytest.junitxml.mangle_test_address` does;
    the name is cut at the first blank, as swebench's parser cuts ids."""
    path, bracket, params = test_id.partition("[")
    names = path.split("::")
    names[0] = names[0].replace("/", ".").removesuffix(".py")
    names[-1] += bracket + params
    name = names[-1].split()[0] if names[-1].split() else names[-1]
    return ".".join(names[:-1]), name


def parse_junit(xml_text: str) -> dict[tuple[str, str], list[str]]:
    """(classname, name) -> outcomes ('pass' / 'skip' / 'fail'), one per testcase element."""
    out: dict[tuple[str, str], list[str]] = {}
    root = ET.fromstring(xml_text)
    for case in root.iter("testcase"):
        tags = {child.tag: child for child in case}
        if "failure" in tags or "error" in tags:
            outcome = "fail"
        elif "skipped" in tags:  # pytest writes an xfail as a skip of type pytest.xfail; swebench counts it passed
            outcome = "pass" if tags["skipped"].get("type") == "pytest.xfail" else "skip"
        else:
            outcome = "pass"
        name = case.get("name", "")
        key = (case.get("classname", ""), name.split()[0] if name.split() else name)
        out.setdefault(key, []).append(outcome)
    return out


def _parser_outcome(test: str, sm: dict[str, str]) -> str:
    if test_passed(test, sm):
        return "pass"
    return "skip" if test_maintained(test, sm) else "fail"


def _junit_outcome(test: str, junit: dict[tuple[str, str], list[str]]) -> str | None:
    """None when the id is ambiguous (two cut ids collide with different outcomes: swebench kept one of them)."""
    outcomes = set(junit.get(mangle(test), []))
    if not outcomes:
        return "fail"
    return outcomes.pop() if len(outcomes) == 1 else None


def check(tests: list[str], sm: dict[str, str], junit_xml: str | None, exit_code: int | None) -> list[str]:
    """Disagreements between the parser's statuses `sm`, the junit report and the exit code, on `tests`."""
    if junit_xml is not None and len(junit_xml.encode()) > MAX_BYTES:
        return [f"the junit report is over {MAX_BYTES >> 20} MB"]
    try:
        junit = parse_junit(junit_xml) if junit_xml is not None else {}
    except ET.ParseError as e:
        return [f"the junit report is not valid XML ({e})"]
    problems = []
    if junit_xml is None and exit_code in (0, 1):
        problems.append(f"pytest exited {exit_code} but wrote no junit report")
    for test in tests:
        theirs, ours = _parser_outcome(test, sm), _junit_outcome(test, junit)
        if ours is not None and ours != theirs:
            problems.append(f"{test}: the log says {theirs}, the junit report says {ours}")
    outcomes = [o for os_ in junit.values() for o in os_]
    if exit_code == 0 and "fail" in outcomes:
        problems.append("pytest exited 0 but the junit report has failures")
    if exit_code == 1 and junit_xml is not None and "fail" not in outcomes:
        problems.append("pytest exited 1 (tests failed) but the junit report has no failure")
    return problems
