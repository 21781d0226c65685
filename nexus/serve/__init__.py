"""nexus.serve: an OpenAI-compatible endpoint that keeps one bounded InferenceStream per conversation.

A layer beside the agent: it uses nexus.runtime and nothing below imports it. `protocol` parses and checks
requests, `sessions` maps a request to the conversation's stream, `engine` runs every forward on one worker
thread, `app` is the FastAPI surface and `cli` the `nexus serve` command.
"""
