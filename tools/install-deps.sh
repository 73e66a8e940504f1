#!/bin/sh
# Installs the Debian 12 packages this project needs (root; apt).
#   tools/install-deps.sh              install whatever is missing
#   tools/install-deps.sh --slurm      the same, and Slurm and MUNGE (slurm-wlm, munge)
#                                      for tests/cli/slurm.sh, which runs the recipe
#                                      under a one-node Slurm (SKIP without them)
# The CUDA toolkit is not a Debian package here: NVIDIA's cuda-toolkit in
# /usr/local/cuda (or ./configure --cudatk-dir=DIR); without it ./configure
# builds the CPU path only.
set -e
# python3-matplotlib: the plots of tools/compare-recipe.sh --out (optional there).
# python3-numpy, python3-venv: the Python binding's tests (python/tests).
pkgs="gcc g++ make pkg-config libfst-dev check libsubunit-dev zlib1g-dev gzip python3-matplotlib python3-numpy python3-venv"
case ${1:-} in
  "") ;;
  --slurm) pkgs="$pkgs slurm-wlm munge" ;;
  *) echo "usage: tools/install-deps.sh [--slurm]" >&2; exit 1 ;;
esac
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
  echo "install-deps: all packages present"
  exit 0
fi
echo "install-deps: installing:$missing"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
