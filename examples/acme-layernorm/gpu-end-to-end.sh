#!/usr/bin/env bash
# The worked example of docs/plugins.md on a GPU (an H100 or H200: sm90; an MI300X:
# gfx942), as its author and a user live it: tune acme_layernorm on this GPU, validate what
# the tuner wrote, publish it under the author's own name (acme-layernorm-<arch>) beside
# the official data packages built from this checkout (flyconfigs publish artifacts
# --all), serve them from a local package index (pypiserver on 127.0.0.1), pip-install
# them from it, and call the kernel in one process: a tuned key is served its winner, a
# key between tuned ones (N=10240) the nearest key's winner widened by the family's adapt.
# Works offline: flyconfigs and the example are installed from this checkout, and the
# packages the machine lacks come as wheels in .whl/ (pypiserver among them).
#
# Usage, from the checkout's root: examples/acme-layernorm/gpu-end-to-end.sh [LOG_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
checkout=$PWD
logs=$(realpath -m "${1:-build/acme-layernorm}")
work=$(mktemp -d)
mkdir -p "$logs"
site=$work/site
pip_target() { python3 -m pip install -q --no-deps --no-compile --no-cache-dir --target "$@"; }
if compgen -G ".whl/*.whl" >/dev/null; then pip_target "$site" --no-index .whl/*.whl; fi
pip_target "$site" --no-index --no-build-isolation . ./examples/acme-layernorm
export PYTHONPATH=$site PYTHONUNBUFFERED=1 FLYCONFIGS_CACHE_DIR=$work/compile-cache
cd "$work"  # from here on, flyconfigs is the installed one

arch=$(python3 -c "from flyconfigs.gpu import current_identity; print(current_identity().arch)")
python3 -m flyconfigs doctor 2>&1 | tee "$logs/doctor.log"
python3 -m flyconfigs tune acme_layernorm --key-grid small --out tuned 2>&1 | tee "$logs/tune.log"
python3 -m flyconfigs validate tuned 2>&1 | tee "$logs/validate.log"
python3 -m flyconfigs publish tuned --name "acme-layernorm-$arch" --target "$arch" --version 1.0.0 --out index 2>&1 \
  | tee "$logs/publish.log"
python3 -m flyconfigs publish "$checkout/artifacts" --all --out index 2>&1 | tee -a "$logs/publish.log"

port=8766
python3 -m pypiserver run -i 127.0.0.1 -p "$port" index > "$logs/index.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
for _ in $(seq 50); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/simple/')" 2>/dev/null && break; sleep 0.2; done
users=$work/user-site
python3 -m pip install -q --no-deps --no-compile --target "$users" --index-url "http://127.0.0.1:$port/simple/" \
  "acme-layernorm-$arch" "flyconfigs-$arch" 2>&1 | tee "$logs/install.log"

ARCH=$arch PYTHONPATH=$site:$users python3 - <<'PY' 2>&1 | tee "$logs/served.json"
import json
import os

import torch

import flyconfigs
from acme_layernorm.kernel import layer_norm, reference

arch = os.environ["ARCH"]
served = {"device": torch.cuda.get_device_name(), "arch": arch}
for n in (8192, 10240):
    key = {"M": 4096, "N": n, "dtype": "bf16"}
    r = flyconfigs.resolve("acme_layernorm", key)
    x, w, b = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for shape in ((4096, n), (n,), (n,)))
    outs = layer_norm(x, w, b)
    # each output's largest error relative to its largest value (y is bf16, mean and rstd fp32)
    errors = [float((o.double() - e).abs().max() / e.abs().max()) for o, e in zip(outs, reference(x, w, b))]
    served[f"N={n}"] = {"source": r.source, "origin": r.origin, "key_match": r.key_match, "config": dict(r.config),
                        "adapted_from": None if r.adapted_from is None else dict(r.adapted_from),
                        "relative_error_y_mean_rstd": errors}
print(json.dumps(served, indent=2))
assert served["N=8192"]["origin"] == f"acme-layernorm-{arch}" and served["N=8192"]["key_match"] == "exact", served
assert served["N=10240"]["origin"] == f"acme-layernorm-{arch}", served
assert served["N=10240"]["config"]["BLOCK_N"] == 16384, served
assert all(e < 2e-2 for n in (8192, 10240) for e in served[f"N={n}"]["relative_error_y_mean_rstd"]), served
PY
