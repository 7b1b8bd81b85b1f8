"""NonMaxSuppression: the pairwise overlap test runs as kiln tensor ops; the greedy selection, whose output size
depends on the data, walks the host copy of that (batch, box, box) table in score order."""

from __future__ import annotations

import numpy as np

from kiln.tensor import dtypes
from kiln.tensor.onnx.node_call import NodeCall
from kiln.tensor.onnx.registry import operator
from kiln.tensor.tensor import Tensor

__all__: list[str] = []


def _suppression_table(boxes: Tensor, center_point_box: bool, iou_threshold: float) -> Tensor:
    """(batch, box, box) bool: box j suppresses box i (their IoU exceeds the threshold)."""
    boxes = boxes.cast(dtypes.float32)
    if center_point_box:
        x_center, y_center, width, height = (boxes[..., index] for index in range(4))
        x_low, x_high = x_center - width / 2, x_center + width / 2
        y_low, y_high = y_center - height / 2, y_center + height / 2
    else:
        # corners may come in either order
        y1, x1, y2, x2 = (boxes[..., index] for index in range(4))
        x_low, x_high, y_low, y_high = x1.minimum(x2), x1.maximum(x2), y1.minimum(y2), y1.maximum(y2)
    area = (x_high - x_low) * (y_high - y_low)

    def pair(value: Tensor, reduce_high: bool) -> Tensor:
        rows, columns = value.unsqueeze(2), value.unsqueeze(1)
        return rows.minimum(columns) if reduce_high else rows.maximum(columns)

    overlap_x = pair(x_high, True) - pair(x_low, False)
    overlap_y = pair(y_high, True) - pair(y_low, False)
    intersection = overlap_x * overlap_y
    union = area.unsqueeze(2) + area.unsqueeze(1) - intersection
    valid = (overlap_x > 0) & (overlap_y > 0) & (area.unsqueeze(2) > 0) & (area.unsqueeze(1) > 0) & (union > 0)
    ratio = intersection / valid.where(union, 1.0)
    return valid & (ratio > iou_threshold)


@operator("NonMaxSuppression", attributes=["center_point_box"])
def _non_max_suppression(call: NodeCall) -> Tensor:
    boxes, scores = call.tensor(0), call.tensor(1)
    limit = max(int(call.scalar(2)), 0) if call.has(2) and call.tensor(2).numel() else 0
    iou_threshold = float(call.scalar(3)) if call.has(3) and call.tensor(3).numel() else 0.0
    score_threshold = float(call.scalar(4)) if call.has(4) and call.tensor(4).numel() else None
    suppresses = np.asarray(
        _suppression_table(boxes, bool(call.attributes.int("center_point_box", 0)), iou_threshold).numpy()
    )
    score_table = np.asarray(scores.numpy())
    selected: list[tuple[int, int, int]] = []
    batches, classes, count = score_table.shape
    for batch in range(batches):
        for klass in range(classes):
            class_scores = score_table[batch, klass]
            # best score first; equal scores in box order
            order = sorted(range(count), key=lambda box: (-class_scores[box], box))
            if score_threshold is not None:
                order = [box for box in order if class_scores[box] > score_threshold]
            kept: list[int] = []
            for box in order:
                if len(kept) >= limit:
                    break
                if not any(suppresses[batch, box, other] for other in kept):
                    kept.append(box)
                    selected.append((batch, klass, box))
    # a Tensor, not a numpy array: a host result would be folded as if it depended on shapes only
    return Tensor(np.array(selected, dtype=np.int64).reshape(-1, 3))
