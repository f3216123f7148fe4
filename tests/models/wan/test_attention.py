"""The Wan block's self- and cross-attention share their q/k/v/o setup: the reference's tensor names (checkpoints
load by them), and one clear error for heads that do not divide the width, in both."""

from __future__ import annotations

import pytest

from avatargen.families.wan.models.attention import CrossAttention, SelfAttention

SHARED = ["q.weight", "q.bias", "k.weight", "k.bias", "v.weight", "v.bias", "o.weight", "o.bias", "norm_q.weight",
          "norm_k.weight"]  # fmt: skip


def test_both_attentions_keep_the_reference_tensor_names_in_order() -> None:
    assert list(SelfAttention(32, 4, 1e-6).state_dict()) == SHARED
    assert list(CrossAttention(32, 4, 1e-6, with_image=False).state_dict()) == SHARED
    image = ["k_img.weight", "k_img.bias", "v_img.weight", "v_img.bias", "norm_k_img.weight"]
    assert list(CrossAttention(32, 4, 1e-6, with_image=True).state_dict()) == SHARED + image


@pytest.mark.parametrize("build", [lambda: SelfAttention(30, 4, 1e-6), lambda: CrossAttention(30, 4, 1e-6, True)])
def test_heads_that_do_not_divide_the_width_fail_at_build_naming_both(build) -> None:
    with pytest.raises(ValueError, match=r"dim \(30\) must be divisible by heads \(4\)"):
        build()
