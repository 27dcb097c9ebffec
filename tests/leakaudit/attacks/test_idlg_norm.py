"""idlg-norm matches directions only: a clipped (rescaled) gradient defeats iDLG's plain L2
match but not it; on an unclipped gradient both rebuild the digit."""

import pytest
import torch

from leakaudit import attacks, data, fl, metrics, models

SHAPE = (1, 28, 28)


@pytest.mark.slow
def test_clipping_alone_stops_idlg_not_idlg_norm():
    ds = data.load("digits")
    model = models.lenet(generator=torch.Generator().manual_seed(0))
    x, y = ds.x_train[3:4], ds.y_train[3:4]
    grads = fl.batch_gradient(model, x, y)
    norm = torch.sqrt(sum((g * g).sum() for g in grads))
    assert norm > 4.0  # so the clip at 4 (the papers' C) rescales it
    clipped = [g * (4.0 / norm) for g in grads]
    psnr = {}
    for name in ("idlg", "idlg-norm"):
        for label, observed in (("plain", grads), ("clipped", clipped)):
            rec = attacks.reconstruct(name, model, observed, input_shape=SHAPE,
                                      num_classes=10, max_iterations=20, seed=0)
            psnr[name, label] = metrics.image_scores(rec.inputs, x)["mean_psnr"]
    assert min(psnr["idlg", "plain"], psnr["idlg-norm", "plain"]) >= metrics.SUCCESS_PSNR
    assert psnr["idlg-norm", "clipped"] >= metrics.SUCCESS_PSNR > psnr["idlg", "clipped"]
