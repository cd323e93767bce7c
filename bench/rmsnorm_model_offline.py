"""Scores RMSNorm's cost model (flyconfigs.kernels.rmsnorm.model) against measurement,
offline: for every tuned artifact, the config the model ranks first among the timed,
spill-free candidates (using each candidate's recorded resources) is looked up in the
same artifact's timings and compared with the tuned winner, and so is the default.

The artifacts' timings come from one tuning run on the device (the screen's 5 samples for
candidates that were not finalists); each row says which timed the model's pick.  Score
only keys the model was not fitted on.  A folder that holds several devices' tunings
needs ``--product``.

    python bench/rmsnorm_model_offline.py artifacts/sm90 --product "NVIDIA H200" --out bench/results/rmsnorm-model-offline-h200.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from _common import artifacts_of, timed_in

from flyconfigs.kernels.rmsnorm.model import MODEL


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--product", help="score this device's tunings only (when FOLDER holds several)")
    args = parser.parse_args()
    rows = []
    for path, artifact in artifacts_of(args.folder, "rmsnorm", args.product):
        timed = [c for c in artifact.candidates if c.timing and c.resources and not c.resources.spill_bytes]
        predicted = MODEL.predict([c.config for c in timed], artifact.key, artifact.device, [c.resources for c in timed])
        ranked = timed[predicted.index(min(predicted))]
        default = next(c for c in artifact.candidates if artifact.default and dict(c.config) == dict(artifact.default.config))
        best = artifact.winner.timing.median_us if artifact.winner.timing else math.nan
        rows.append({"key": dict(artifact.key), "file": path.name, "tuned_us": best,
                     "model_config": dict(ranked.config), "model_us": ranked.timing.median_us if ranked.timing else None,
                     "model_timed_in": timed_in(ranked, artifact),
                     "default_us": default.timing.median_us if default.timing else None})

    def figures(field: str) -> dict[str, float]:
        ratios = [r[field] / r["tuned_us"] for r in rows if r[field]]
        return {"within_10pct_of_tuned": sum(x <= 1.10 for x in ratios) / len(ratios),
                "geomean_slowdown_vs_tuned": math.exp(sum(map(math.log, ratios)) / len(ratios)),
                "worst_slowdown_vs_tuned": max(ratios)}

    summary = {"model": f"{MODEL.name} {MODEL.version}", "folder": args.folder.name, "keys": len(rows), "model_pick": figures("model_us"),
               "default": figures("default_us")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "rmsnorm-model-offline", "summary": summary, "rows": rows},
                                   indent=1, sort_keys=True) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
