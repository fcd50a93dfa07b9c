"""The main window and its controllers: actions, opening, editing, projects, export, comparison, recovery, start-up."""
