# Sourced by test.sh and demo.sh: prints the folder of the shared models and
# reference outputs. ACCORD_SHARED when set; else ../shared beside the
# checkout; else, for a clone of a local repository, ../shared beside that
# repository (a clone made elsewhere, say in a temporary folder, still
# finds the models of the checkout it came from). The first candidate that
# holds models/stories260K.bin wins; none: ../shared beside the checkout.
shared_dir() {
  local root=$1
  if [ -n "${ACCORD_SHARED:-}" ]; then
    echo "$ACCORD_SHARED"
    return
  fi
  local beside origin
  beside=$(cd "$root/.." && pwd)/shared
  origin=$(git -C "$root" remote get-url origin 2>/dev/null || true)
  origin=${origin#file://}
  for candidate in "$beside" ${origin:+"$origin/../shared"}; do
    if [ -f "$candidate/models/stories260K.bin" ]; then
      (cd "$candidate" && pwd)
      return
    fi
  done
  echo "$beside"
}
