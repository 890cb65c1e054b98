"""mlu-ops' case files: read them into opcase (reader), write opcase cases as them (writer), and
reproduce their seeded random inputs bit for bit (random_data)."""
from harness.mluops.reader import MluCase, MluTensor, load_mluops, read_node
from harness.mluops.schema import KERNELS, MluopsError, MluopsFormatError, UnsupportedKernel
from harness.mluops.writer import case_from_mluops, save_mluops

__all__ = ["KERNELS", "MluCase", "MluTensor", "MluopsError", "MluopsFormatError", "UnsupportedKernel",
           "case_from_mluops", "load_mluops", "read_node", "save_mluops"]
