"""Plain ``torch.nn`` vision models (torchvision is not installable here): ResNet-18/50,
VGG-16, MobileNetV2, a YOLOv3-style detector (Darknet-53 backbone).  ``width`` scales channels so a tiny CPU variant shares the code."""
from __future__ import annotations

from torch import Tensor, nn


def _conv_bn(cin: int, cout: int, k: int = 3, s: int = 1, groups: int = 1, act: type = nn.ReLU) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), act(inplace=True))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, c: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(_conv_bn(cin, c, 3, stride), nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c))
        self.short = nn.Identity() if stride == 1 and cin == c else nn.Sequential(
            nn.Conv2d(cin, c, 1, stride, bias=False), nn.BatchNorm2d(c))

    def forward(self, x: Tensor) -> Tensor:
        return (self.body(x) + self.short(x)).relu()


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, c: int, stride: int) -> None:
        super().__init__()
        cout = c * 4
        self.body = nn.Sequential(_conv_bn(cin, c, 1), _conv_bn(c, c, 3, stride),
                                  nn.Conv2d(c, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.short = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: Tensor) -> Tensor:
        return (self.body(x) + self.short(x)).relu()


class ResNet(nn.Module):
    """ResNet; ``cifar=True`` uses the 3x3 stem without max-pool (32x32 inputs)."""

    def __init__(self, block: type, layers: list[int], classes: int, width: int = 64, cifar: bool = False) -> None:
        super().__init__()
        self.stem = _conv_bn(3, width, 3, 1) if cifar else nn.Sequential(
            _conv_bn(3, width, 7, 2), nn.MaxPool2d(3, 2, 1))
        stages, cin = [], width
        for i, n in enumerate(layers):
            c = width * 2 ** i
            for j in range(n):
                stages.append(block(cin, c, 2 if (j == 0 and i > 0) else 1))
                cin = c * block.expansion
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.stages(self.stem(x)))


def resnet18(classes: int = 10, width: int = 64) -> ResNet:
    return ResNet(BasicBlock, [2, 2, 2, 2], classes, width, cifar=True)


def resnet50(classes: int = 1000, width: int = 64) -> ResNet:
    return ResNet(Bottleneck, [3, 4, 6, 3], classes, width)


class VGG16(nn.Module):
    """VGG-16 (configuration D) with batch norm off, as in the original."""

    CFG = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]

    def __init__(self, classes: int = 1000, scale: float = 1.0, pool: int = 7, hidden: int = 4096) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in self.CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                c = max(4, int(v * scale))
                layers += [nn.Conv2d(cin, c, 3, padding=1), nn.ReLU(inplace=True)]
                cin = c
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.AdaptiveAvgPool2d(pool), nn.Flatten(), nn.Linear(cin * pool * pool, hidden), nn.ReLU(True),
            nn.Dropout(), nn.Linear(hidden, hidden), nn.ReLU(True), nn.Dropout(), nn.Linear(hidden, classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hid = cin * expand
        layers: list[nn.Module] = [] if expand == 1 else [_conv_bn(cin, hid, 1, act=nn.ReLU6)]
        layers += [_conv_bn(hid, hid, 3, stride, groups=hid, act=nn.ReLU6),
                   nn.Conv2d(hid, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: Tensor) -> Tensor:
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 (t, c, n, s settings of the paper) with a width multiplier."""

    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]

    def __init__(self, classes: int = 1000, width: float = 1.0) -> None:
        super().__init__()
        cin = max(8, int(32 * width))
        last = max(16, int(1280 * max(1.0, width)) if width >= 1 else int(1280 * width))
        layers: list[nn.Module] = [_conv_bn(3, cin, 3, 2, act=nn.ReLU6)]
        for t, c, n, s in self.SETTINGS:
            cout = max(8, int(c * width))
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        layers.append(_conv_bn(cin, last, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(last, classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


class DarkResidual(nn.Module):
    """Darknet-53 residual unit: 1x1 conv to c/2, 3x3 conv back to c, plus the input."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.body = nn.Sequential(_conv_bn(c, c // 2, 1, act=_leaky), _conv_bn(c // 2, c, 3, act=_leaky))

    def forward(self, x: Tensor) -> Tensor:
        return x + self.body(x)


def _leaky(inplace: bool = True) -> nn.Module:
    return nn.LeakyReLU(0.1, inplace=inplace)


class YoloV3(nn.Module):
    """YOLOv3-style detector (Redmon & Farhadi 2018): the Darknet-53 backbone (stages of 1, 2, 8, 8, 4
    residual units) and one stride-32 detection head of ``anchors x (5 + classes)`` channels per cell."""

    STAGES = (1, 2, 8, 8, 4)

    def __init__(self, classes: int = 20, width: int = 32, anchors: int = 3) -> None:
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(3, width, 3, act=_leaky)]
        c = width
        for n in self.STAGES:
            layers.append(_conv_bn(c, c * 2, 3, 2, act=_leaky))
            c *= 2
            layers += [DarkResidual(c) for _ in range(n)]
        self.backbone = nn.Sequential(*layers)
        self.head = nn.Sequential(_conv_bn(c, c // 2, 1, act=_leaky), _conv_bn(c // 2, c, 3, act=_leaky),
                                  nn.Conv2d(c, anchors * (5 + classes), 1))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.backbone(x))
