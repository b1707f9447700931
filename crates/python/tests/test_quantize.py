"""gpack.convert with llama-quantize's types and an importance matrix
(`imatrix=`): the same file as `gpack convert --quant T --imatrix F`, byte for
byte (the CLI's blocks are llama-quantize's: crates/convert/tests/quantize.rs);
the matrix changes the blocks; one made for another model is refused and
leaves nothing behind."""

import gguf
import pytest

import gpack
from conftest import TESTDATA, run_cli

SRC = TESTDATA / "quantize" / "mix-F16.gguf"
IMATRIX = TESTDATA / "quantize" / "mix.imatrix"


@pytest.mark.parametrize("quant", ["Q4_K_M", "IQ4_XS"])
def test_convert_with_imatrix_equals_the_cli(workdir, quant):
    py_out = workdir / f"py-{quant}-imatrix.gpack"
    cli_out = workdir / f"cli-{quant}-imatrix.gpack"
    rep = gpack.convert(SRC, py_out, quant=quant, imatrix=IMATRIX)
    run_cli("convert", SRC, "-o", cli_out, "--quant", quant, "--imatrix", IMATRIX)
    assert py_out.read_bytes() == cli_out.read_bytes()
    assert rep["imatrix"] == "mix.imatrix" and rep["quant"] == quant
    with gpack.open(py_out) as f:
        assert f.manifest["convert"]["imatrix"] == "mix.imatrix"
    # The matrix was used: without it the blocks differ.
    plain = workdir / f"py-{quant}.gpack"
    gpack.convert(SRC, plain, quant=quant)
    assert plain.read_bytes() != py_out.read_bytes()


def test_imatrix_from_llama_imatrix_dat_works_too(workdir):
    # The legacy .dat of the edge fixture's matrix, through the same path.
    dat = TESTDATA / "quantize" / "edge.imatrix.dat"
    src = TESTDATA / "quantize" / "edge-F32.gguf"
    py_out, cli_out = workdir / "py-edge-dat.gpack", workdir / "cli-edge-dat.gpack"
    gpack.convert(src, py_out, quant="Q4_K_M", imatrix=dat)
    run_cli("convert", src, "-o", cli_out, "--quant", "Q4_K_M", "--imatrix", dat)
    assert py_out.read_bytes() == cli_out.read_bytes()


def test_imatrix_for_another_model_is_refused(workdir):
    out = workdir / "never-imatrix.gpack"
    other = TESTDATA / "quantize" / "moe.imatrix"
    assert gguf.GGUFReader(other).fields["general.type"].contents() == "imatrix"
    with pytest.raises(gpack.GpackError, match="imatrix"):
        gpack.convert(SRC, out, quant="Q4_K_M", imatrix=other)
    assert not out.exists()
    with pytest.raises(gpack.GpackError):
        gpack.convert(SRC, out, quant="Q4_K_M", imatrix=workdir / "missing.imatrix")
    assert not out.exists()
