"""The FLOPs conventions a run configuration may name (``convention = ...``): a vocabulary of its
own, read by :mod:`.config` and :mod:`.validate` alike."""

CONVENTIONS = ("megatron", "megatron2024", "palm", "torch")
