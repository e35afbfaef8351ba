"""The one name ``streaming.vision`` imports from here."""


class VisionDataset:
    """Never constructed by a test; raises if it is."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise NotImplementedError("torchvision is a test stand-in here (tests/_shims/README.md)")


class CIFAR10(VisionDataset):
    """Imported by streaming's CIFAR-10 converter only."""
