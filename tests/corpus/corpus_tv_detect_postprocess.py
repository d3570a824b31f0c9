"""Detection inference with torchvision's box ops on torch_xla: CPU fallbacks outside `aten::`.

Idiom: the post-processing of torchvision's two-stage detectors (`roi_heads.postprocess_detections`
in torchvision.models.detection, the model zoo's `references/detection` evaluation loop): a
small conv detector predicts class logits and box deltas per anchor; the boxes are decoded,
clipped to the image (`box_ops.clip_boxes_to_image`), the low scores dropped with
`torch.where(scores > thresh)[0]`, tiny boxes removed (`remove_small_boxes`), overlapping ones
suppressed per class (`batched_nms`), the top-k kept, and the kept boxes pooled from the feature
map with `roi_align` (a second stage's input). Random weights and images, 8 batches, each ended
with `torch_xla.sync()`; the detections are read back with `.cpu()` as an evaluator does.
On torch_xla 2.9 `torchvision::nms` and `torchvision::roi_align` run on the host (the truth's
`executed_fallback_ops()`), and the number of kept boxes depends on the data.
"""

from __future__ import annotations

import hook
import torch
import torch.nn as nn
import torch_xla
from torchvision.ops import batched_nms, roi_align
from torchvision.ops import boxes as box_ops

CLASSES, ANCHORS, SIZE, STRIDE, BATCHES = 4, 3, 64, 8, 8
SCORE_THRESH, NMS_THRESH, DETECTIONS = 0.26, 0.5, 100


class TinyDetector(nn.Module):
    """A backbone and per-anchor heads, in the shape of an RPN/box head."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                                      nn.Conv2d(32, 32, 3, 2, 1), nn.ReLU())
        self.cls_logits = nn.Conv2d(32, ANCHORS * CLASSES, 1)
        self.bbox_pred = nn.Conv2d(32, ANCHORS * 4, 1)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        features = self.backbone(images)
        n = images.shape[0]
        logits = self.cls_logits(features).permute(0, 2, 3, 1).reshape(n, -1, CLASSES)
        deltas = self.bbox_pred(features).permute(0, 2, 3, 1).reshape(n, -1, 4)
        return features, logits, deltas


def make_anchors(device: torch.device) -> torch.Tensor:
    """Square anchors of 3 sizes centred on every cell of the stride-8 feature map."""
    centres = (torch.arange(SIZE // STRIDE, dtype=torch.float32) + 0.5) * STRIDE
    cy, cx = torch.meshgrid(centres, centres, indexing="ij")
    half = torch.tensor([6.0, 12.0, 20.0])
    cx, cy = cx.reshape(-1, 1).expand(-1, ANCHORS), cy.reshape(-1, 1).expand(-1, ANCHORS)
    return torch.stack([cx - half, cy - half, cx + half, cy + half], -1).reshape(-1, 4).to(device)


def decode(deltas: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    widths, heights = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    cx, cy = anchors[:, 0] + 0.5 * widths, anchors[:, 1] + 0.5 * heights
    px, py = cx + deltas[:, 0] * widths * 0.1, cy + deltas[:, 1] * heights * 0.1
    pw, ph = widths * torch.exp(deltas[:, 2] * 0.2), heights * torch.exp(deltas[:, 3] * 0.2)
    return torch.stack([px - pw / 2, py - ph / 2, px + pw / 2, py + ph / 2], -1)


def postprocess(logits: torch.Tensor, deltas: torch.Tensor, anchors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One image: the steps of postprocess_detections, class-agnostic boxes per anchor."""
    boxes = box_ops.clip_boxes_to_image(decode(deltas, anchors), (SIZE, SIZE))
    scores = torch.softmax(logits, -1)[:, 1:]  # drop the background class
    labels = torch.arange(1, CLASSES, device=logits.device).view(1, -1).expand_as(scores).reshape(-1)
    boxes = boxes[:, None, :].expand(-1, CLASSES - 1, -1).reshape(-1, 4)
    scores = scores.reshape(-1)
    inds = torch.where(scores > SCORE_THRESH)[0]  # corpus: score-filter
    boxes, scores, labels = boxes[inds], scores[inds], labels[inds]
    keep = box_ops.remove_small_boxes(boxes, min_size=1e-2)  # corpus: small-boxes
    boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
    keep = batched_nms(boxes, scores, labels, NMS_THRESH)  # corpus: nms
    keep = keep[:DETECTIONS]
    return boxes[keep], scores[keep], labels[keep]


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    model = TinyDetector().to(device).eval()
    anchors = make_anchors(device)
    kept = []
    with torch.no_grad():
        for batch in range(BATCHES):  # corpus: loop
            hook.mark(f"infer:i{batch}")
            images = torch.rand(1, 3, SIZE, SIZE).to(device)
            features, logits, deltas = model(images)
            boxes, scores, labels = postprocess(logits[0], deltas[0], anchors)  # corpus: postprocess
            rois = torch.cat([torch.zeros_like(boxes[:, :1]), boxes], 1)
            pooled = roi_align(features, rois, (7, 7), spatial_scale=1 / STRIDE, sampling_ratio=2)  # corpus: roi
            torch_xla.sync()  # corpus: sync
            detections = {"boxes": boxes.cpu(), "scores": scores.cpu(), "labels": labels.cpu()}  # corpus: read
            kept.append(len(detections["boxes"]))
            print(f"batch {batch}: {kept[-1]} detections, pooled {tuple(pooled.shape)}")
    hook.finish(iterations=BATCHES, kept=kept)


if __name__ == "__main__":
    main()
