"""A stand-in tokenizer for streams fed token ids directly (random-weight models in benchmarks and GPU tests).

Token i is the word 't{i}' (1:1 word-level vocabulary) and the chat template just joins message contents. The
stream uses a tokenizer only to render chat turns and decode reply text; where the caller feeds ids, this is enough
and needs no model files (a GPU machine without network has none).
"""
from __future__ import annotations


def id_tokenizer(vocab_size: int, eos_id: int = 2):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="t0", eos_token=f"t{eos_id}")
    tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    return tok
