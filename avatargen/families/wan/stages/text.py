"""Prompt tokenizers for umT5: the downloaded ``google/umt5-xxl`` folder, or a byte-level stand-in for ``wan_tiny``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor

from avatargen.families.wan.config import WanModelConfig
from avatargen.errors import CheckpointError, first_line

PAD, EOS, BYTE_OFFSET = 0, 1, 3  # umT5's pad and eos ids; byte b is token b + 3 (after pad, eos, unk)


class Tokenizer(Protocol):
    """Text -> (ids (1, L) long, mask (1, L): 1 for real tokens), padded or cut to the DiT's ``text_len``."""

    def __call__(self, text: str) -> tuple[Tensor, Tensor]: ...


class ByteTokenizer:
    """UTF-8 bytes as tokens, then eos (the toy model's vocabulary: 256 bytes + pad, eos, unk)."""

    def __init__(self, length: int):
        self.length = length

    def __call__(self, text: str) -> tuple[Tensor, Tensor]:
        ids = [b + BYTE_OFFSET for b in text.encode("utf-8")][: self.length - 1] + [EOS]
        real = len(ids)
        ids += [PAD] * (self.length - real)
        mask = [1] * real + [0] * (self.length - real)
        return torch.tensor([ids]), torch.tensor([mask])


def open_tokenizer_folder(folder: Path, shown: str) -> Any:
    """transformers' ``AutoTokenizer`` from a local folder: the one test of whether a folder holds a tokenizer, for a
    render and ``avatargen weights check`` alike. ``CheckpointError`` (one line, starting with ``shown``, the folder
    as the caller names it) when transformers cannot make one of it: no tokenizer files, or damaged ones."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, LookupError, TypeError) as error:  # a damaged tokenizer.json raises KeyError
        reason = first_line(error)
        if reason.endswith("from one of:"):  # transformers' list of what it looked for follows, over four lines
            reason = "transformers found no tokenizer.json, nor a slow tokenizer it can convert"
        raise CheckpointError(f"{shown} is not a tokenizer folder ({reason}); download it with the Wan folder "
                              "(docs/models.md)") from error  # fmt: skip


class FolderTokenizer:
    """transformers' ``AutoTokenizer`` from a local folder, as the reference calls it (eos added, max length)."""

    def __init__(self, folder: Path, length: int, key: str = "model.wan.tokenizer"):
        self.tokenizer = open_tokenizer_folder(folder, f"{key}: '{folder}'")
        self.length = length

    def __call__(self, text: str) -> tuple[Tensor, Tensor]:
        out = self.tokenizer(
            [" ".join(text.split())], padding="max_length", truncation=True, max_length=self.length,
            add_special_tokens=True, return_tensors="pt",
        )  # fmt: skip
        return out["input_ids"], out["attention_mask"]


def tokenizer_for(wan: WanModelConfig, root: Path | None, length: int) -> Tokenizer:
    """``model.wan.tokenizer`` (a folder under ``root``), or the byte-level stand-in when it is null."""
    if wan.tokenizer is None:
        return ByteTokenizer(length)
    if root is None:  # random weights at full size: ids only need to be in the vocabulary
        return ByteTokenizer(length)
    folder = root / wan.tokenizer
    if not folder.is_dir():
        raise CheckpointError(f"model.wan.tokenizer: '{folder}' does not exist; download it (docs/models.md) or point model.wan.tokenizer at it")
    return FolderTokenizer(folder, length)
