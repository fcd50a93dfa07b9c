"""Moved to :mod:`qtquant.app.commands`; this name stays until every import uses ``qtquant.app``."""

from .app.commands import (AutoShareCommand, Command, CommandStack, CompoundCommand, RemoveMemberCommand,
                           SetMarchCommand, SetOptionsCommand, SetPolicyCommand, ShareCommand, UngroupCommand)

__all__ = ["Command", "ShareCommand", "UngroupCommand", "RemoveMemberCommand", "AutoShareCommand",
           "SetOptionsCommand", "SetPolicyCommand", "SetMarchCommand", "CompoundCommand", "CommandStack"]
