"""The two cache protocols and resume, on a real InferenceStream (random-weight 2-layer model, real eviction):
`stream` never re-prefills, `reprefill` rebuilds every turn, a fresh backend facing a transcript rebuilds once.
Plus what must be shown #3 at scale: observations totalling 10x the budget, cache bytes flat at the budget."""

from nexus.agent.backends.scripted import ScriptedBackend
from nexus.agent.config import AgentConfig, Limits
from nexus.agent.run import TaskSpec, run_task
from nexus.agent.trajectory import load

from .conftest import tiny_stream
from tests.conftest import LOCAL

REPLY = "```bash\necho hi\n```"


def transcript(turns: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a test."}, {"role": "user", "content": "Task: say hi."}]
    for i in range(turns):
        msgs += [{"role": "assistant", "content": REPLY}, {"role": "user", "content": f"Output:\nhi {i}\n\n[exit code 0]"}]
    return msgs


def drive(backend, turns: int):
    msgs, infos = transcript(0), []
    for _ in range(turns):
        reply, sync = backend.reply(msgs)
        infos.append(sync)
        msgs = msgs + [{"role": "assistant", "content": reply.text}, {"role": "user", "content": "Output:\nhi\n\n[exit code 0]"}]
    return infos


def test_stream_protocol_appends_only_the_new_messages():
    backend = ScriptedBackend([REPLY] * 4, stream=tiny_stream(512, 64), protocol="stream")
    infos = drive(backend, 4)
    assert [i.rebuilt for i in infos] == [None] * 4
    assert [i.appended for i in infos] == [2, 1, 1, 1]  # only the observation since the last reply
    assert backend.stats()["resets"] == 0


def test_reprefill_protocol_rebuilds_every_turn():
    backend = ScriptedBackend([REPLY] * 4, stream=tiny_stream(512, 64), protocol="reprefill")
    infos = drive(backend, 4)
    assert [i.rebuilt for i in infos] == [None, "reprefill", "reprefill", "reprefill"]
    assert [i.appended for i in infos] == [2, 4, 6, 8]
    assert backend.stats()["resets"] == 3


def test_a_fresh_backend_on_an_existing_transcript_is_a_resume():
    backend = ScriptedBackend([REPLY] * 4, stream=tiny_stream(512, 64))
    _, sync = backend.reply(transcript(2))
    assert sync.rebuilt == "resume" and sync.appended == 6
    _, sync = backend.reply(transcript(2) + [{"role": "assistant", "content": REPLY},
                                             {"role": "user", "content": "more"}])
    assert sync.rebuilt is None and sync.appended == 1


def test_observations_ten_times_the_budget_keep_the_cache_flat(calc_repo, tmp_path):
    policy = "nexus"
    budget, chunk = 512, 128
    # each command prints ~900 tokens of numbers; 8 of them are > 10x the budget
    big = "```bash\npython3 -c \"print(' '.join(str(i) for i in range(220)))\"\n```"
    config = AgentConfig(limits=Limits(max_steps=9), max_observation_chars=20_000)
    spec = TaskSpec(repo=str(calc_repo.path), commit=calc_repo.commit, issue="print numbers", model="replay:-",
                    policy=policy, budget=budget, chunk_size=chunk, sandbox=LOCAL, config=config.as_dict())
    stream = tiny_stream(budget, chunk, policy)
    backend = ScriptedBackend([big] * 8 + ["```bash\nsubmit\n```"], stream=stream)
    outcome = run_task(spec, calc_repo, tmp_path / "out", backend=backend)
    assert outcome.exit_status == "submitted"
    traj = load(tmp_path / "out")
    stats = [s["stats"] for s in traj["steps"]]
    observed = sum(len(stream.tokenizer.encode(s["observation"])) for s in traj["steps"] if s.get("observation"))
    assert observed > 10 * budget
    assert stats[-1]["tokens_seen"] > 10 * budget
    assert {s["cache_bytes"] for s in stats} == {stats[0]["cache_bytes"]}  # allocated bytes: flat from step 1
    assert all(s["tokens_stored"] <= budget for s in stats)
    assert stats[-1]["peak_tokens_stored"] <= budget + chunk  # at most one chunk over, between evictions
    per_token = stats[0]["stored_bytes"] / stats[0]["tokens_stored"]
    full = stats[1:]  # from step 2 on the cache has been full
    assert all(budget - 64 <= s["tokens_stored"] <= budget for s in full)  # at budget, within two 32-token blocks
    assert max(s["stored_bytes"] for s in full) <= per_token * budget
    assert stats[-1]["eviction_events"] > 8 and stats[-1]["resets"] == 0
