"""Expected values derived independently of daydream, for tests that would otherwise pin the tool's
own output (issue 39): each computed from a published architecture or from a trace's raw table."""

from __future__ import annotations


def resnet50_weight_numel(classes: int = 1000) -> int:
    """Conv and fc weight elements of ResNet-50 (He et al. 2016, torchvision's model): a 7x7 stem,
    bottleneck stages of 3, 4, 6, 3 blocks of widths 64-512 with expansion 4 and a 1x1 projection in
    each stage's first block, a 2048 x ``classes`` fc (25,502,912 for 1,000 classes; batch-norm
    and bias parameters not counted)."""
    n, inp = 7 * 7 * 3 * 64, 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            n += inp * width + 9 * width * width + width * 4 * width + (inp * 4 * width if b == 0 else 0)
            inp = 4 * width
    return n + 2048 * classes
