"""The dialogs: open/calibrate and error dialogs, the share confirmation, status messages and progress."""
