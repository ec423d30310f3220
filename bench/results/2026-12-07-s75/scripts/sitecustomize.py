import faulthandler
import signal

faulthandler.register(signal.SIGUSR1, all_threads=True)
