"""A Hugging Face-style model folder for Dynamo, made from a GGUF file.

Dynamo's frontend tokenizes and applies the chat template itself, from a
model folder (config.json, tokenizer.json, tokenizer_config.json); spanc
serves a GGUF. This writes that folder from the GGUF's own metadata (the
byte-level BPE vocabulary and merges, the special tokens, the chat
template, the context length), so the frontend's token ids are the ones
spanc's tokenizer gives, without fetching anything. Weights are not
copied: the folder only describes the model.

    python model_card.py MODEL.gguf OUT_DIR
"""

import json
import os
import sys

from gguf import GGUFReader
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models
from tokenizers import pre_tokenizers

# GGUF token types (llama.cpp's llama_token_type).
CONTROL = 3
USER_DEFINED = 4


def field(reader, key, default=None):
    found = reader.fields.get(key)
    return default if found is None else found.contents()


def pre_tokenizer(name):
    """llama.cpp's pre-tokenizer by name, as the tokenizers library says
    it. smollm splits digits one by one before GPT-2's split."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False,
                                          use_regex=True)
    if name in ("smollm", "gpt-2", "gpt2", "default"):
        steps = [byte_level]
        if name == "smollm":
            steps.insert(0, pre_tokenizers.Split(Regex(r"\p{N}"),
                                                 "isolated"))
        return pre_tokenizers.Sequence(steps)
    sys.exit("model_card.py: pre-tokenizer %r is not supported" % name)


def write_model_card(gguf_path, out_dir):
    reader = GGUFReader(gguf_path)
    if field(reader, "tokenizer.ggml.model") != "gpt2":
        sys.exit("model_card.py: only byte-level BPE (gpt2) vocabularies")
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1))
              for m in field(reader, "tokenizer.ggml.merges")]
    vocab = {token: index for index, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges,
                                     fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizer(
        field(reader, "tokenizer.ggml.pre", "default"))
    tokenizer.decoder = decoders.ByteLevel()
    special = [AddedToken(tokens[i], special=True, normalized=False)
               for i, kind in enumerate(types) if kind == CONTROL]
    tokenizer.add_special_tokens(special)

    architecture = field(reader, "general.architecture")
    context = int(field(reader, architecture + ".context_length"))
    bos = int(field(reader, "tokenizer.ggml.bos_token_id"))
    eos = int(field(reader, "tokenizer.ggml.eos_token_id"))
    os.makedirs(out_dir, exist_ok=True)
    tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": architecture,
        "vocab_size": len(tokens),
        "max_position_embeddings": context,
        "hidden_size": int(field(reader, architecture + ".embedding_length")),
        "num_hidden_layers": int(field(reader, architecture + ".block_count")),
        "num_attention_heads": int(
            field(reader, architecture + ".attention.head_count")),
        "num_key_value_heads": int(
            field(reader, architecture + ".attention.head_count_kv")),
        "bos_token_id": bos,
        "eos_token_id": eos,
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tokens[bos],
        "eos_token": tokens[eos],
        "model_max_length": context,
        "add_bos_token": bool(field(reader, "tokenizer.ggml.add_bos_token",
                                    False)),
        "chat_template": field(reader, "tokenizer.chat_template"),
    }
    generation = {"bos_token_id": bos, "eos_token_id": eos}
    for name, document in (("config.json", config),
                           ("tokenizer_config.json", tokenizer_config),
                           ("generation_config.json", generation)):
        with open(os.path.join(out_dir, name), "w") as out:
            json.dump(document, out, indent=1)
    return out_dir


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    write_model_card(sys.argv[1], sys.argv[2])
