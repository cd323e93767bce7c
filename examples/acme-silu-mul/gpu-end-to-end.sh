#!/usr/bin/env bash
# The example's whole life on a GPU, as its author and a user live it: tune acme_silu_mul
# on this GPU, validate what the tuner wrote, publish it under the author's own name
# (acme-silu-mul-sm90) beside the official flyconfigs-sm90 built from artifacts/sm90, serve
# both from a local package index (pypiserver on 127.0.0.1), pip-install both from it,
# and call both kernels in one process, each with the config its package serves.
# Works offline: flyconfigs and the example are installed from this checkout, and the
# packages the machine lacks come as wheels in .whl/ (pypiserver among them).
#
# Usage, from the checkout's root: examples/acme-silu-mul/gpu-end-to-end.sh [LOG_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
logs=${1:-build/acme-silu-mul}
work=$(mktemp -d)
mkdir -p "$logs"
site=$work/site
pip_target() { python3 -m pip install -q --no-deps --no-compile --no-cache-dir --target "$@"; }
if compgen -G ".whl/*.whl" >/dev/null; then pip_target "$site" --no-index .whl/*.whl; fi
pip_target "$site" --no-index --no-build-isolation . ./examples/acme-silu-mul
export PYTHONPATH=$site PYTHONUNBUFFERED=1 FLYCONFIGS_CACHE_DIR=$work/compile-cache
cd "$work"  # from here on, flyconfigs is the installed one

python3 -m flyconfigs tune acme_silu_mul --key-grid small --out tuned 2>&1 | tee "$logs/tune.log"
python3 -m flyconfigs validate tuned 2>&1 | tee "$logs/validate.log"
python3 -m flyconfigs publish tuned --name acme-silu-mul-sm90 --target sm90 --version 1.0.0 --out index 2>&1 \
  | tee "$logs/publish.log"
checkout=$OLDPWD
python3 -m flyconfigs publish "$checkout/artifacts/sm90" --target sm90 --version "$(cat "$checkout/artifacts/sm90/VERSION")" \
  --out index 2>&1 | tee -a "$logs/publish.log"

port=8765
python3 -m pypiserver run -i 127.0.0.1 -p "$port" index > "$logs/index.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
for _ in $(seq 50); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/simple/')" 2>/dev/null && break; sleep 0.2; done
users=$work/user-site
python3 -m pip install -q --no-deps --no-compile --target "$users" --index-url "http://127.0.0.1:$port/simple/" \
  acme-silu-mul-sm90 flyconfigs-sm90 2>&1 | tee "$logs/install.log"

PYTHONPATH=$site:$users python3 - <<'PY' 2>&1 | tee "$logs/served.json"
import json

import torch

import flyconfigs
from acme_silu_mul.kernel import reference, silu_mul
from flyconfigs.kernels import rms_norm

served = {"device": torch.cuda.get_device_name()}
for kernel, key in (("acme_silu_mul", {"M": 4096, "N": 8192, "dtype": "bf16"}),
                    ("rmsnorm", {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"})):
    r = flyconfigs.resolve(kernel, key)
    served[kernel] = {"source": r.source, "origin": r.origin, "version": r.version, "selection": r.selection,
                      "key_match": r.key_match, "config": dict(r.config), "file": r.file}
gate, up = (torch.randn(4096, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
out = silu_mul(gate, up)
served["acme_silu_mul"]["max_abs_error"] = float((out.double() - reference(gate, up)).abs().max())
x, w = torch.randn(4096, 8192, device="cuda", dtype=torch.bfloat16), torch.randn(8192, device="cuda", dtype=torch.bfloat16)
y = rms_norm(x, w)
ref = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
served["rmsnorm"]["max_abs_error"] = float((y.double() - ref).abs().max())
print(json.dumps(served, indent=2))
assert served["acme_silu_mul"]["origin"] == "acme-silu-mul-sm90", served
assert served["rmsnorm"]["origin"] == "flyconfigs-sm90", served
PY
