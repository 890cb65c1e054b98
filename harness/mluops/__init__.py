"""mlu-ops' case files: read them into opcase (reader), write opcase cases as them (writer), and
reproduce their seeded random inputs bit for bit (random_data)."""
from harness.mluops.reader import MluCase, MluTensor, load_mluops, read_node
from harness.mluops.schema import MluopsError, MluopsFormatError, UnsupportedKernel, kernels
from harness.mluops.writer import case_from_mluops, save_mluops

__all__ = ["MluCase", "MluTensor", "MluopsError", "MluopsFormatError", "UnsupportedKernel",
           "case_from_mluops", "kernels", "load_mluops", "read_node", "save_mluops"]
