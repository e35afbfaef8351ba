"""The one name ``streaming.vision`` imports from here."""


def to_tensor(pic: object) -> object:
    raise NotImplementedError("torchvision is a test stand-in here (tests/_shims/README.md)")
