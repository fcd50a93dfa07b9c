from .cli import entry

if __name__ == "__main__":  # a spawned child process imports this module too
    entry()
