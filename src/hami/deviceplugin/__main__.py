"""``python -m hami.deviceplugin``: the same as ``hami device-plugin``."""

from hami.deviceplugin.command import main

main()
