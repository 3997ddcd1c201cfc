"""What the notebooks use around the ops, not part of the op library:

- ``graph``: print a model's nodes, show it in Netron (live and as a picture);
- ``browser``: the headless Chromium that takes Netron's picture;
- ``native``: capture what C++ code prints on file descriptors 1 and 2;
- ``verify``: the ONNX checker, then ONNX Runtime against torch, in one line.
"""
